"""Huey wiring: the queues, the routing table, periodic schedules, the consumer entry."""
