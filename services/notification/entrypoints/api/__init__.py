"""The notification HTTP API (DESIGN.md §5 "Notification API"), one router file per resource."""
