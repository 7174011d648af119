"""Shared event-bus mechanism: in-process bus and Kafka producer/consumer adapters."""
