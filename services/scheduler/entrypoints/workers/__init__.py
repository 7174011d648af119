"""Background workers: the planner, the dispatcher (service_layer/dispatch_service.py) and the
runtime that runs them with health, readiness and metrics (`runtime.WorkerRuntime`)."""
