"""Demo data for a newcomer's first ``make run``."""
