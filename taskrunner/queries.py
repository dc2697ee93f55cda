"""Read queries of the operator pages, part of the ledger (``TaskRunLedger`` inherits them)."""

from __future__ import annotations


class LedgerQueries:
    """Page-specific reads over the ledger tables; only the ledger class uses this mixin."""
