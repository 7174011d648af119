"""Notification service: subscriptions, fan-out webhook deliveries, email and in-app alerts."""
