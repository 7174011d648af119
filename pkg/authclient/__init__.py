"""Shared bearer-token verification for both services."""
