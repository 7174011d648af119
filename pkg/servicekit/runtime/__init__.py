"""Running a service process: worker loops, the leased pipeline, the watchdog, the event loop."""
