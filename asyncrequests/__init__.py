"""Async requests: what a tenant's API client polls ("is my statement ready?")."""
