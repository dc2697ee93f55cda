"""Alerts: rules over what the ledger knows, told to on-call through the event outbox."""
