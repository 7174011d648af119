"""Shared plumbing of both services, by job: `runtime` (worker loops, the leased pipeline, the
watchdog, the event loop), `http` (server, protocol, body limit, problems, routing, health), `data`
(database, ids, cursors, retention, secret box, JSON, timestamps); beside them the console-script
frame, dev keys, logging and the input text types."""
