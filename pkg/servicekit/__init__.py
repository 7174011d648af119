"""Shared HTTP-service plumbing: problem+json, cursors, secret box, dev keys, health."""
