"""Helpers for refindex's tests and benchmarks: the mutation fuzzer, test-file builders, misbehaving jobs.

Nothing in the core path imports this package.  Its names load on first use, so
``refindex.testing.jobs`` stays as light as refindex itself.
"""

from __future__ import annotations

from ..lazy import attribute_loader

_WHERE = {"one_byte_chunks_values": "builders", "write_one_byte_chunks": "builders",
          "selftest": "jobs", "die_while_writing": "jobs", "stall": "jobs"}

__all__ = ["die_while_writing", "one_byte_chunks_values", "selftest", "stall", "write_one_byte_chunks"]

__getattr__ = attribute_loader(__name__, _WHERE)
