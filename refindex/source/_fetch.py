"""Byte ranges of a file fetched now or in the background: what a reader needs beyond a cache.

A reader that knows what it will ask for next (the chunks of a dataset, in order) starts
fetching them while it decodes what it has.  :class:`RangeFetcher` fetches a list of ranges
as one round trip of concurrent requests (ranges above two parts in parts side by side,
:func:`split_ranges`: object stores serve each connection at a bounded rate), retried on transient
failures and counted in the same :class:`ReadStats` as the block cache.  ``start`` returns
a ``concurrent.futures.Future`` for all of them; ``start_each`` one per range, done when that
range's own request is, so a reader decodes the first chunks of a batch while the rest travel.
A server that ignores Range requests sends the whole file for each: ranges are cut from it
(:func:`~refindex.source.ranged`, up to its size limit), and once one such answer has come
the file is kept and every later range cut from it; told so beforehand (``whole_size``: an
index records it of its source), the fetcher asks for the whole file once, at its first read
(a file too large for that is read in ranges, and refused naming the reason if they come whole).
Async filesystems (s3, gcs, http batches of more than 16 parts) run the requests on fsspec's
own event loop thread; others (smaller http batches, through refindex's own requests) in a
pool of threads the process shares; local files are read with ``os.pread``.
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
from ._cache import ReadStats, merge_ranges
from ._failures import ranged, too_large_whole, whole_file
from ._open import quick_filesystem
from ._retry import is_transient, retry_policy, with_retries

PART_BYTES, MAX_PARTS = 512 << 10, 16  # a range above two parts goes in parts side by side, at most 16
WAITED_PART = 256 << 10  # parts of a range the reader is waiting for (``start(..., waited=True)``)
MERGE_GAP = 64 << 10  # ranges this close share a request in start_each (the gap costs less than a request)

Ranges = list[tuple[int, int]]


def split_ranges(ranges: Ranges, cut: tuple[int, int] = (PART_BYTES, MAX_PARTS)) -> tuple[Ranges, list[list[int]]]:
    """Ranges above two parts cut into parts fetched side by side, ``cut`` = (part size, most parts
    of a range): (parts, the part numbers of each range)."""
    part, most = cut
    parts: Ranges = []
    owner: list[list[int]] = []
    for a, b in ranges:
        n = 1 if b - a <= 2 * part else min(most, -(-(b - a) // part))
        step = -(-(b - a) // n)
        owner.append(list(range(len(parts), len(parts) + n)))
        parts += [(x, min(b, x + step)) for x in range(a, b, step)]
    return parts, owner


# requests in flight at once through the threads below, every file of the process: a read-ahead's batch
# and the nodes of a chunk index fetched beside it (issue 44: 72 nodes and 26 parts of a window) in one wave
SIDE_BY_SIDE = 128
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _threads() -> ThreadPoolExecutor:
    """One pool for every fetcher of the process (its threads made as requests wait for one): a
    process reading hundreds of files keeps :data:`SIDE_BY_SIDE` threads, not a pool per file."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(SIDE_BY_SIDE, thread_name_prefix="refindex-fetch")
        return _POOL


def _after_fork() -> None:
    """A forked child has none of the pool's threads (nor, maybe, a free lock): it makes its own."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class _Trip:
    """The requests of one ``start_each``: counted as one round trip when the last one is done."""

    def __init__(self, n: int):
        self.left = n
        self.t0 = time.perf_counter()

    def last(self) -> bool:
        self.left -= 1  # (under the fetcher's lock)
        return self.left == 0


def _item_of(fut: "Future[list[bytes]]", i: int) -> "Future[bytes]":
    """A future for item ``i`` of a future's list."""
    out: Future = Future()

    def done(f: Future) -> None:
        try:
            out.set_result(f.result()[i])
        except BaseException as e:  # noqa: BLE001 - the list's failure is each item's
            out.set_exception(e)

    fut.add_done_callback(done)
    return out


def _slice_of(span: "Future[list[bytes]]", at: int, n: int) -> "Future[bytes]":
    """A future for the ``n`` bytes at ``at`` of a span's future (no copy: a view when a part)."""
    out: Future = Future()

    def done(f: Future) -> None:
        try:
            data = f.result()[0]
        except BaseException as e:  # noqa: BLE001 - the span's failure is each of its ranges'
            out.set_exception(e)
            return
        out.set_result(data if at == 0 and n == len(data) else memoryview(data)[at: at + n])

    span.add_done_callback(done)
    return out


class RangeFetcher:
    """Ranges of one file, fetched as one round trip each call (see the module docstring)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, stats: ReadStats | None = None,
                 whole_size: int | None = None):
        """``whole_size``: the server ignores Range requests and the file is this long (see the module)."""
        self.url = url
        self.stats = stats or ReadStats()
        self._lock = threading.Lock()
        self._whole: bytes | None = None  # the whole file, sent by a server that ignores Range requests
        # (a file too large to be read whole is read in ranges, refused with the reason if they come whole)
        self._whole_size = whole_size if whole_size is not None and not too_large_whole(whole_size) else None
        self._whole_lock = threading.Lock()
        self.local = urls.is_local(url)
        self._fd = -1
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

    @property
    def cuts_from_whole(self) -> bool:
        """Are ranges cut from the whole file (a server that ignores Range requests), not fetched?"""
        return not self.local and (self._whole is not None or self._whole_size is not None)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def fetch(self, ranges: Ranges) -> list[bytes]:
        """The bytes of ``ranges``, now."""
        if self.local:
            return [self._pread(a, b) for a, b in ranges]
        return self.start(ranges, waited=True).result()

    def start(self, ranges: Ranges, waited: bool = False) -> "Future[list[bytes]]":
        """Start fetching ``ranges`` in the background; the future gives their bytes (or the error).
        ``waited``: the caller waits for them at once, so each goes in parts of :data:`WAITED_PART`
        (a connection's rate is bounded; a read-ahead's ranges have time to travel at it)."""
        if self.local:
            fut: Future = Future()
            try:
                fut.set_result([self._pread(a, b) for a, b in ranges])
            except BaseException as e:  # noqa: BLE001
                fut.set_exception(e)
            return fut
        if self.cuts_from_whole:
            return self._cut_from_whole(ranges)
        cut = (WAITED_PART if waited else PART_BYTES, MAX_PARTS)
        return self._submit(self._fs_for(ranges, cut), ranges, None, cut)

    def start_each(self, ranges: Ranges, parts: int = MAX_PARTS) -> "list[Future[bytes]]":
        """Start fetching ``ranges`` as one round trip, with a future for each that is done when
        its own request is (the bytes, a ``memoryview`` where it shares a request).  Ranges within
        :data:`MERGE_GAP` share a request of up to :data:`PART_BYTES` or a ``parts``-th of the
        batch: as many requests as ``start`` would make of the ranges merged.  Up to
        :data:`SIDE_BY_SIDE` of them go through the threads (over HTTP, refindex's own requests:
        no import of aiohttp, ~0.3 s, for a few dozen small ranges), more through ``_fs_for``'s."""
        if not ranges:
            return []
        if self.cuts_from_whole:
            held = self._cut_from_whole(ranges)
            return [_item_of(held, i) for i in range(len(ranges))]
        total = sum(b - a for a, b in ranges)
        spans, where = merge_ranges([a for a, _ in ranges], [b - a for a, b in ranges], max_gap=MERGE_GAP,
                                    max_span=max(PART_BYTES, -(-total // parts)))
        if self.local:
            fetched = [self.start([span]) for span in spans]
        else:
            cut = (PART_BYTES, max(1, -(-parts // len(spans))))  # a few large spans: in parts, as start's
            fs = self.fs if len(spans) <= SIDE_BY_SIDE and hasattr(self.fs, "for_many") else self._fs_for(spans, cut)
            trip = _Trip(len(spans))
            # small spans leave first (a chunk index's nodes beside a batch of chunks: libhdf5 reads them
            # first, and their answers should not queue behind the chunks'), then the rest in file order
            order = sorted(range(len(spans)), key=lambda i: (spans[i][1] - spans[i][0] > MERGE_GAP, i))
            submitted = {i: self._submit(fs, [spans[i]], trip, cut) for i in order}
            fetched = [submitted[i] for i in range(len(spans))]
        return [_slice_of(fetched[i], at, b - a) for (a, b), (i, at) in zip(ranges, where)]

    def _fs_for(self, ranges: Ranges, cut: tuple[int, int]) -> Any:
        """The filesystem for one round trip of ``ranges`` cut by ``cut``: over HTTP a few ranges go
        through refindex's own requests, a large batch through fsspec's."""
        fs = self.fs
        if hasattr(fs, "for_many"):
            fs = fs.for_many(len(split_ranges(ranges, cut)[0]), sum(b - a for a, b in ranges))
        return fs

    def _submit(self, fs: Any, ranges: Ranges, trip: _Trip | None, cut: tuple[int, int]) -> "Future[list[bytes]]":
        """Fetch ``ranges`` in the background: on fsspec's event loop for an async filesystem, else
        in the process's pool of threads."""
        if getattr(fs, "async_impl", False):
            return asyncio.run_coroutine_threadsafe(self._fetch_async(fs, ranges, trip, cut), fs.loop)
        return _threads().submit(self._fetch_sync, fs, ranges, trip, cut)

    def _cut_from_whole(self, ranges: Ranges) -> "Future[list[bytes]]":
        """``ranges`` cut from the whole file (fetched first, in the pool, when it is not held yet)."""
        if self._whole is None:
            return _threads().submit(lambda: self._cut(self._fetched_whole(), ranges))
        fut: Future = Future()
        try:
            fut.set_result(self._cut(self._whole, ranges))
        except BaseException as e:  # noqa: BLE001
            fut.set_exception(e)
        return fut

    def _cut(self, whole: bytes, ranges: Ranges) -> list[bytes]:
        view = memoryview(whole)
        for a, b in ranges:
            if b > len(whole):
                raise SourceError(f"the file ended early: asked for bytes {a}-{b}, it is {len(whole)} bytes long "
                                  "(changed or truncated since it was indexed?)", file=self.url)
        return [bytes(view[a:b]) for a, b in ranges]

    def _fetched_whole(self) -> bytes:
        """The whole file, asked for once (a server that ignores Range requests: ``whole_size``)."""
        with self._whole_lock:
            if self._whole is None:
                t0 = time.perf_counter()
                try:
                    data = with_retries(self.fs.cat_file, self.path)
                except Exception as e:  # noqa: BLE001 - any backend's failure
                    raise SourceError(f"could not read the file: {e}", file=self.url) from e
                self._count(t0, [(0, len(data))])
                self._whole = data
            return self._whole

    def _pread(self, a: int, b: int) -> bytes:
        data = os.pread(self._fd, b - a, a)
        if len(data) != b - a:
            raise SourceError(f"short read at {a}: got {len(data)} of {b - a} bytes", file=self.url)
        return data

    def _count(self, t0: float, parts: Ranges, trip: _Trip | None = None, pieces: list[Any] | None = None) -> None:
        """Requests and bytes as they travelled (``pieces``: the answers, which a server that ignores
        Range requests makes whole files), and the round trip once its last request is done."""
        sent = sum(b - a for a, b in parts) if pieces is None else sum(
            len(d) for d in pieces if not isinstance(d, BaseException))
        with self._lock:
            self.stats.requests += len(parts)
            self.stats.bytes_fetched += sent
            if trip is None or trip.last():
                self.stats.round_trips += 1
                self.stats.seconds += time.perf_counter() - (trip.t0 if trip else t0)

    def _joined(self, ranges: Ranges, owner: list[list[int]], pieces: list[Any], parts: Ranges) -> list[bytes]:
        pieces = list(pieces)
        for i, ((a, b), d) in enumerate(zip(parts, pieces)):
            if isinstance(d, BaseException):
                raise SourceError(f"could not read bytes {a}-{b}: {d}", file=self.url) from d
            if len(d) != b - a:  # a server that ignores Range requests (cut, or refused), or a shorter file
                if whole_file(d, a, b) and self._whole is None:
                    self._whole = bytes(d)  # every later range is cut from it
                pieces[i] = ranged(d, a, b, self.url)
        return [pieces[own[0]] if len(own) == 1 else b"".join(pieces[i] for i in own) for own in owner]

    async def _fetch_async(self, fs: Any, ranges: Ranges, trip: _Trip | None = None,
                           cut: tuple[int, int] = (PART_BYTES, MAX_PARTS)) -> list[bytes]:
        parts, owner = split_ranges(ranges, cut)
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
        self._count(t0, parts, trip, pieces)
        return self._joined(ranges, owner, pieces, parts)

    def _fetch_sync(self, fs: Any, ranges: Ranges, trip: _Trip | None = None,
                    cut: tuple[int, int] = (PART_BYTES, MAX_PARTS)) -> list[bytes]:
        parts, owner = split_ranges(ranges, cut)
        t0 = time.perf_counter()
        try:
            pieces = with_retries(fs.cat_ranges, [self.path] * len(parts), [a for a, _ in parts],
                                  [b for _, b in parts])
        except Exception as e:  # noqa: BLE001 - any backend's failure
            raise SourceError(f"could not read bytes of {len(ranges)} range(s): {e}", file=self.url) from e
        self._count(t0, parts, trip, pieces)
        return self._joined(ranges, owner, pieces, parts)
