"""Serving HTTP: the server and its protocol, body limit, problems, routing, health, docs."""
