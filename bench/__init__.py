"""Benchmarks and the chaos harness: the evidence behind docs/guarantees.md."""
