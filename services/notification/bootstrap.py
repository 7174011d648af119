"""Composition root: wires concrete adapters into the service layer (filled in by the API issue)."""
