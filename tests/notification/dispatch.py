"""Driving the delivery dispatcher step by step (a manual clock decides what is due)."""

from __future__ import annotations

from notification.service_layer.dispatch import DeliveryDispatcher


async def deliver_due(dispatcher: DeliveryDispatcher) -> int:
    """One claim, its attempts, their completions written. Returns how many were claimed."""
    claimed, _ = await dispatcher.pipeline.pump()
    await dispatcher.pipeline.drain()
    return claimed
