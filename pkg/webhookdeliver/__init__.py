"""Shared webhook delivery mechanism: signing, SSRF-safe client, backoff."""
