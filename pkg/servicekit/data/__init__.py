"""Data of both services: the database engine, ids, cursors, retention, secrets, JSON, time."""
