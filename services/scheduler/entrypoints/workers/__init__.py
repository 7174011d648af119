"""The worker role: the runtime that runs the workers `scheduler.bootstrap.build_workers` wires
(planner, dispatcher, outbox relay, tenant consumer, retention) with health, readiness and
metrics (`runtime.WorkerRuntime`), and `serve`."""
