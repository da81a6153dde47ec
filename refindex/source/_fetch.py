"""Byte ranges of a file fetched now or in the background: what a reader needs beyond a cache.

A reader that knows what it will ask for next (the chunks of a dataset, in order) starts
fetching them while it decodes what it has.  :class:`RangeFetcher` fetches a list of ranges
as one round trip of concurrent requests (ranges above :data:`SPLIT_ABOVE` in parts side by
side: object stores serve each connection at a bounded rate), retried on transient
failures and counted in the same :class:`ReadStats` as the block cache.  ``start`` returns
a ``concurrent.futures.Future``: async filesystems (s3, gcs, http batches of more than 16
parts) run the requests on fsspec's own event loop thread; others (smaller http batches,
through refindex's own requests) in a small thread pool; local files are read with ``os.pread``.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .. import urls
from ..errors import SourceError
from ._cache import ReadStats
from ._open import quick_filesystem
from ._retry import is_transient, retry_policy, with_retries

SPLIT_ABOVE, PART_BYTES, MAX_PARTS = 1 << 20, 512 << 10, 16

Ranges = list[tuple[int, int]]


def split_ranges(ranges: Ranges) -> tuple[Ranges, list[list[int]]]:
    """Large ranges cut into parts fetched side by side: (parts, the part numbers of each range)."""
    parts: Ranges = []
    owner: list[list[int]] = []
    for a, b in ranges:
        n = 1 if b - a <= SPLIT_ABOVE else min(MAX_PARTS, -(-(b - a) // PART_BYTES))
        step = -(-(b - a) // n)
        owner.append(list(range(len(parts), len(parts) + n)))
        parts += [(x, min(b, x + step)) for x in range(a, b, step)]
    return parts, owner


class RangeFetcher:
    """Ranges of one file, fetched as one round trip each call (see the module docstring)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, stats: ReadStats | None = None):
        self.url = url
        self.stats = stats or ReadStats()
        self._lock = threading.Lock()
        self.local = urls.is_local(url)
        self._fd = -1
        self._pool: ThreadPoolExecutor | None = None
        if self.local:
            self._fs, self.path = None, urls.split(url)[1]
            try:
                self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
            except OSError as e:
                raise SourceError(f"cannot open: {e}", file=url) from e
        else:
            self._fs, self.path = None, url
            self._options = storage_options

    @property
    def fs(self) -> Any:
        """The filesystem of a remote file (:func:`~refindex.source.quick_filesystem`: over HTTP,
        refindex's own requests up to a batch of 16, fsspec's beyond), made at its first use."""
        if self._fs is None and not self.local:
            self._fs, self.path = quick_filesystem(self.url, self._options)
        return self._fs

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    def fetch(self, ranges: Ranges) -> list[bytes]:
        """The bytes of ``ranges``, now."""
        if self.local:
            return [self._pread(a, b) for a, b in ranges]
        return self.start(ranges).result()

    def start(self, ranges: Ranges) -> "Future[list[bytes]]":
        """Start fetching ``ranges`` in the background; the future gives their bytes (or the error)."""
        if self.local:
            fut: Future = Future()
            try:
                fut.set_result([self._pread(a, b) for a, b in ranges])
            except BaseException as e:  # noqa: BLE001
                fut.set_exception(e)
            return fut
        fs = self.fs
        if hasattr(fs, "for_many"):  # a few ranges through refindex's own requests, a large batch through fsspec
            fs = fs.for_many(len(split_ranges(ranges)[0]), sum(b - a for a, b in ranges))
        if getattr(fs, "async_impl", False):
            return asyncio.run_coroutine_threadsafe(self._fetch_async(fs, ranges), fs.loop)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(4, thread_name_prefix="refindex-fetch")
        return self._pool.submit(self._fetch_sync, fs, ranges)

    def _pread(self, a: int, b: int) -> bytes:
        data = os.pread(self._fd, b - a, a)
        if len(data) != b - a:
            raise SourceError(f"short read at {a}: got {len(data)} of {b - a} bytes", file=self.url)
        return data

    def _count(self, t0: float, parts: Ranges) -> None:
        with self._lock:
            self.stats.round_trips += 1
            self.stats.requests += len(parts)
            self.stats.bytes_fetched += sum(b - a for a, b in parts)
            self.stats.seconds += time.perf_counter() - t0

    def _joined(self, ranges: Ranges, owner: list[list[int]], pieces: list[Any], parts: Ranges) -> list[bytes]:
        for (a, b), d in zip(parts, pieces):
            if isinstance(d, BaseException):
                raise SourceError(f"could not read bytes {a}-{b}: {d}", file=self.url) from d
            if len(d) != b - a:
                raise SourceError(f"short read at {a}: got {len(d)} of {b - a} bytes", file=self.url)
        return [pieces[own[0]] if len(own) == 1 else b"".join(pieces[i] for i in own) for own in owner]

    async def _fetch_async(self, fs: Any, ranges: Ranges) -> list[bytes]:
        parts, owner = split_ranges(ranges)
        t0 = time.perf_counter()
        for delay in [*retry_policy.delays(), None]:
            try:
                pieces = await fs._cat_ranges([self.path] * len(parts), [a for a, _ in parts],
                                                   [b for _, b in parts], on_error="return")
                failed = next((p for p in pieces if isinstance(p, BaseException)), None)
                if failed is not None:
                    raise failed
                break
            except Exception as e:
                if delay is None or not is_transient(e):
                    raise SourceError(f"could not read bytes of {len(ranges)} range(s): {e}", file=self.url) from e
                await asyncio.sleep(delay)
        self._count(t0, parts)
        return self._joined(ranges, owner, pieces, parts)

    def _fetch_sync(self, fs: Any, ranges: Ranges) -> list[bytes]:
        parts, owner = split_ranges(ranges)
        t0 = time.perf_counter()
        try:
            pieces = with_retries(fs.cat_ranges, [self.path] * len(parts), [a for a, _ in parts],
                                  [b for _, b in parts])
        except Exception as e:  # noqa: BLE001 - any backend's failure
            raise SourceError(f"could not read bytes of {len(ranges)} range(s): {e}", file=self.url) from e
        self._count(t0, parts)
        return self._joined(ranges, owner, pieces, parts)
