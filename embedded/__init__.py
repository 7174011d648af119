"""Composition root of the embedded default (`make run`): both services in one process."""
