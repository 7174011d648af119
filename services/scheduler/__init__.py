"""Scheduler service: tenant-declared time triggers, runs and their delivery evidence."""
