"""Helpers for refindex's tests and benchmarks: the mutation fuzzer and test-file builders.

Nothing in the core path imports this package.
"""

from .builders import one_byte_chunks_values, selftest, write_one_byte_chunks

__all__ = ["one_byte_chunks_values", "selftest", "write_one_byte_chunks"]
