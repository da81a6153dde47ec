"""A read cache shaped for how libhdf5 reads a remote file's metadata.

Many small reads scattered over the file, each waiting for the previous one: blocks are
kept for the whole scan (metadata is re-read often, the file is never re-read twice by a
scan), adjacent missing blocks are fetched in one request, head and tail of the file are
fetched together on open, and every request, round trip and byte is counted so
``refindex scan --stats`` can report them.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..errors import SourceError
from ..isolation.gcpause import held_collections
from ..options import FetchOptions
from ._failures import ranged, whole_file
from ._gather import cat_parts
from ._retry import is_transient, retry_policy
from ._readonly import ReadOnlyFile
from ._record import ReadRecorder

WHOLE_PARTS = 16  # the rest of a small file is fetched as this many concurrent requests
PART = 2 << 20  # longer ranges are fetched as concurrent parts of this size (a connection's speed is bounded)


@dataclass
class ReadStats:
    requests: int = 0
    bytes_fetched: int = 0
    seconds: float = 0.0
    round_trips: int = 0  # waits: concurrent requests count once

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "round_trips": self.round_trips, "bytes_fetched": self.bytes_fetched,
                "fetch_seconds": round(self.seconds, 4)}


class FetchInFork(SourceError):
    """A forked copy of a block cache was asked for bytes it does not hold (only its parent fetches)."""


def refuse_in_fork(cache: "BlockCache") -> None:
    """A forked copy was asked to fetch: refused, and marked ``refused_in_fork``.  A scan may absorb the
    error on its way (an attribute it reports unreadable, a dimension it names otherwise): the mark,
    not the error, tells a forked scan that its index is not the one a scan makes."""
    cache.refused_in_fork = True
    raise FetchInFork("cannot fetch in a forked process (its parent opened the file)", file=cache.path)


class BlockCache(ReadOnlyFile):
    """A read-only, seekable file over ``fs.cat_file`` with a keep-everything block cache."""

    def __init__(self, fs, path: str, size: int, options: FetchOptions | None = None, stats: ReadStats | None = None,
                 ends: tuple[bytes, bytes] | None = None):
        """``ends``: the file's first ``first_read`` and last ``tail_read + block_size`` bytes when the
        caller fetched them already (see ``source._open.info_and_ends``); else they are fetched here."""
        super().__init__()
        self.fs = fs
        self.path = path
        self.size = int(size)
        self.opts = options or FetchOptions()
        self.stats = stats or ReadStats()
        self.blocks: dict[int, bytes] = {}
        self.pos = 0
        # Set while a scan records the pages its index carries: every read is noted, and the
        # exact ranges of read_ranges are fetched as whole pages and kept in ``pieces``.
        self.recorder: ReadRecorder | None = None
        self.pieces: dict[int, bytes] = {}
        self.ranges_served: bool | None = None  # does the server serve ranges? (:func:`serves_ranges`)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        if ends is not None and self._keep_ends(*ends):
            return
        head = min(self.size, self.opts.first_read)
        tail = max(head, self.size - self.opts.tail_read) if self.opts.tail_read else self.size
        ranges = [(0, head)] if head else []
        if tail < self.size:
            ranges.append((tail, self.size))
        if ranges:
            self._fetch_ranges(ranges)

    def _keep_ends(self, head: bytes, tail: bytes) -> bool:
        """Cache the whole blocks of head and tail fetched elsewhere; False if they do not fit the file."""
        bs, size = self.opts.block_size, self.size
        if len(head) == size and whole_file(head, 0, min(size, self.opts.first_read)):
            self._keep_whole(head)  # a server that ignores Range requests sent the whole (small) file
            return True
        if len(head) != min(size, self.opts.first_read) or len(tail) != min(size, self.opts.tail_read + bs):
            return False  # the file changed, or a server that ignores ranges: fetch them here
        _judge_ranges(self, head, 0, len(head))
        _judge_ranges(self, tail, size - len(tail), size)
        for data, start in ((head, 0), (tail, size - len(tail))):
            first = -(-start // bs)  # whole blocks only: a cached block is never partial, except at EOF
            for i in range(first, -(-(start + len(data)) // bs)):
                block = data[i * bs - start : (i + 1) * bs - start]
                if len(block) == min(bs, size - i * bs):
                    self.blocks[i] = block
        return True

    # io.RawIOBase protocol (the rest: ReadOnlyFile) --------------------------
    def readinto(self, b) -> int:
        data = self.read_range(self.pos, self.pos + len(b))
        n = len(data)
        memoryview(b).cast("B")[:n] = data  # (h5py's Cython view of libhdf5's buffer: 2.8 us a slice assignment)
        self.pos += n
        return n

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self.pos
        data = self.read_range(self.pos, self.pos + n)
        self.pos += len(data)
        return data

    # cache -----------------------------------------------------------------
    def read_range(self, start: int, end: int) -> bytes:
        """Bytes ``start:end`` of the file (what libhdf5 reads, and any reader of the file's contents)."""
        if self.recorder is not None:
            self.recorder.note(max(0, start), min(self.size, end))
        return self.peek(start, end)

    def peek(self, start: int, end: int) -> bytes:
        """:meth:`read_range` not recorded: guesses of what to fetch early (the prefetch's parsing)."""
        start, end = max(0, start), min(self.size, end)
        if end <= start:
            return b""
        bs = self.opts.block_size
        first, last = start // bs, (end - 1) // bs
        if first == last:  # most of libhdf5's reads: within one cached block (blocks are never evicted)
            block = self.blocks.get(first)
            if block is not None:
                return block[start - first * bs : end - first * bs]
        with self._lock:
            missing = [i for i in range(first, last + 1) if i not in self.blocks]
            if missing:
                self._fetch_blocks(missing)
            return self._cached(start, end)

    def fetch_now(self, start: int, end: int) -> bytes:
        """Bytes ``start:end`` fetched now, cached or not (what the answer tells of the server is judged;
        a forked copy refuses: only its parent fetches)."""
        with self._lock:
            return self._get([(start, end)])[0]

    def _cached(self, start: int, end: int) -> bytes:
        """Bytes ``start:end`` from blocks that are all cached."""
        bs = self.opts.block_size
        first, last = start // bs, (end - 1) // bs
        if first == last:
            return self.blocks[first][start - first * bs : end - first * bs]
        return b"".join([self.blocks[first][start - first * bs :],
                         *(self.blocks[i] for i in range(first + 1, last)),
                         self.blocks[last][: end - last * bs]])

    def at_hand(self, start: int, end: int) -> bytes:
        """The bytes from ``start`` towards ``end`` that are cached, without fetching (fewer, or none)."""
        bs = self.opts.block_size
        start, end = max(0, start), min(self.size, end)
        stop = start
        while stop < end and stop // bs in self.blocks:
            stop = (stop // bs + 1) * bs
        stop = min(stop, end)
        return self._cached(start, stop) if stop > start else b""

    @property
    def holds_everything(self) -> bool:  # every byte of the file cached (a small file fetched whole)?
        return len(self.blocks) >= -(-self.size // self.opts.block_size)

    def everything(self) -> bytes:
        """The whole file, from the cache (when it :attr:`holds_everything`)."""
        return b"".join(self.blocks[i] for i in range(-(-self.size // self.opts.block_size)))

    def prefetch(self, offsets: list[int]) -> None:
        """Fetch the blocks holding ``offsets`` (with neighbours) that are not cached yet, at once."""
        bs = self.opts.block_size
        with self._lock:
            missing = sorted({o // bs for o in offsets if 0 <= o < self.size} - self.blocks.keys())
            if missing:
                self._fetch_blocks(missing)

    def _fetch_blocks(self, missing: list[int]) -> None:
        """Fetch ``missing`` blocks and their uncached neighbours; runs in one round trip."""
        bs = self.opts.block_size
        nblocks = -(-self.size // bs)
        n = max(0, self.opts.neighbours)
        ahead = n + max(0, self.opts.ahead)
        want = sorted({j for i in missing for j in range(max(0, i - n), min(nblocks, i + ahead + 1))
                       if j not in self.blocks} | set(missing))
        whole = self._whole_rest(len(want))
        if whole is not None:
            want = whole
        gap_blocks = self.opts.max_gap // bs
        runs: list[list[int]] = [[want[0], want[0]]]
        for i in want[1:]:
            if i - runs[-1][1] - 1 <= gap_blocks:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        if whole is not None:  # one round trip of parallel parts, not one long transfer
            part = max(1, -(-len(want) // WHOLE_PARTS))
            runs = [[a, min(b, a + part - 1)] for a, b in runs for a in range(a, b + 1, part)]
        self._fetch_ranges([(a * bs, min(self.size, (b + 1) * bs)) for a, b in runs])

    def _whole_rest(self, wanted: int) -> list[int] | None:
        """Every block not cached yet, when a scan has needed a third of a small file (else None).

        Many small objects scatter metadata over a whole file (an NWB file of hundreds of
        series): a scan would fetch most of it anyway, a tree level per round trip.
        """
        bs = self.opts.block_size
        nblocks = -(-self.size // bs)
        if self.size > self.opts.whole_file_max or 3 * (len(self.blocks) + wanted) < nblocks:
            return None
        return [i for i in range(nblocks) if i not in self.blocks]

    def _fetch_ranges(self, ranges: list[tuple[int, int]]) -> None:
        """Fetch block-aligned ``ranges`` into the cache, several at once when the filesystem allows it."""
        bs = self.opts.block_size
        ranges = [((a // bs) * bs, min(self.size, -(-b // bs) * bs)) for a, b in ranges]
        for (start, end), data in zip(ranges, self._get(ranges)):
            for off in range(0, end - start, bs):
                self.blocks[(start + off) // bs] = data[off : off + bs]

    def _keep_whole(self, data: bytes) -> None:
        """The whole file arrived (a server that ignores Range requests): every block from it."""
        self.ranges_served = False
        bs = self.opts.block_size
        for i in range(-(-self.size // bs)):
            self.blocks.setdefault(i, bytes(data[i * bs : (i + 1) * bs]))

    def _get(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of ``ranges`` in one round trip: concurrent requests, each at most :data:`PART` bytes
        (a long range is fetched as parts side by side), a failed one retried alone; counted and checked."""
        if os.getpid() != self._pid:  # a forked copy: the event loop that fetches runs in the parent only
            refuse_in_fork(self)
        parts = [(p, min(b, p + PART)) for a, b in ranges for p in range(a, b, PART)] or [(a, a) for a, _ in ranges]
        datas = self._fetch_parts(parts)
        out, at = [], 0
        for a, b in ranges:
            n = max(1, -(-(b - a) // PART))
            out.append(datas[at] if n == 1 else b"".join(datas[at:at + n]))
            at += n
        return out

    def _fetch_parts(self, parts: list[tuple[int, int]]) -> list[bytes]:
        """Fetch ``parts`` concurrently; transient failures are retried (only the parts that failed).
        Garbage collection is held meanwhile: libhdf5 may be waiting with h5py's lock (refindex.gcpause)."""
        with held_collections():
            return self._fetch_parts_held(parts)

    def _fetch_parts_held(self, parts: list[tuple[int, int]]) -> list[bytes]:
        out: list[Any] = [None] * len(parts)
        todo = list(range(len(parts)))
        delays = retry_policy.delays()
        for attempt in range(len(delays) + 1):
            t0 = time.perf_counter()
            datas = self._cat([parts[i] for i in todo])
            self.stats.seconds += time.perf_counter() - t0
            self.stats.round_trips += 1
            self.stats.requests += len(todo)
            failed = []
            for i, d in zip(todo, datas):
                if isinstance(d, BaseException):
                    failed.append((i, d))
                    continue
                self.stats.bytes_fetched += len(d)
                start, end = parts[i]
                _judge_ranges(self, d, start, end)
                if len(d) == self.size and whole_file(d, start, end):
                    self._keep_whole(d)  # a server that ignores Range requests sent the whole (small) file
                out[i] = ranged(d, start, end, self.path)
            if not failed:
                return out
            if attempt == len(delays) or not all(is_transient(e) for _, e in failed):
                self._raise(failed, parts)
            time.sleep(delays[attempt])
            todo = [i for i, _ in failed]
        return out  # not reached

    def _cat(self, parts: list[tuple[int, int]]) -> list[Any]:
        """One concurrent fetch; a failed request's exception takes its place in the result."""
        if len(parts) == 1:
            try:
                return [self.fs.cat_file(self.path, start=parts[0][0], end=parts[0][1])]
            except Exception as e:  # noqa: BLE001 - judged by the caller (retried when transient)
                return [e]
        return cat_parts(self.fs, self.path, parts, self.opts.concurrency)  # concurrent on async filesystems

    def _raise(self, failed: list[tuple[int, BaseException]], parts: list[tuple[int, int]]) -> None:
        _raise_failed(failed, parts, self.path)

    def read_ranges(self, offsets: list[int], sizes: list[int]) -> list[bytes]:
        """Many ``(offset, size)`` ranges: cached ones from the blocks, the rest in one round trip.

        The rest is fetched exactly (ranges close to each other merged), not as whole
        blocks: small values scattered over a file (scalars beside large data) would
        otherwise cost a block each.  Those bytes are not kept.
        """
        bs = self.opts.block_size
        out: list[bytes | None] = [None] * len(offsets)
        todo: list[int] = []
        rec = self.recorder if self.recorder is not None and self.recorder.active else None
        with self._lock:
            for i, (o, n) in enumerate(zip(offsets, sizes)):
                if rec is not None:
                    rec.note(o, o + n)
                blocks = range(o // bs, (o + n - 1) // bs + 1) if n else range(0)
                if all(b in self.blocks for b in blocks):
                    out[i] = self._cached(o, o + n) if n else b""
                else:
                    todo.append(i)
            if todo:
                starts, lengths = [offsets[i] for i in todo], [sizes[i] for i in todo]
                if rec is not None:  # whole pages, kept for the index's pages
                    starts, lengths = _paged(starts, lengths, rec.page_size, self.size)
                spans, where = merge_ranges(starts, lengths)
                datas = self._get(spans)
                if rec is not None:
                    self.pieces.update((a, d) for (a, _), d in zip(spans, datas))
                for i, (span, at), start in zip(todo, where, starts):
                    at += offsets[i] - start
                    out[i] = datas[span][at : at + sizes[i]]
        return [b if b is not None else b"" for b in out]

    def bytes_of(self, start: int, end: int) -> bytes | None:
        """Bytes ``start:end`` if this cache holds them all (blocks, or pieces kept while recording)."""
        start, end = max(0, start), min(self.size, end)
        if end <= start:
            return b""
        bs = self.opts.block_size
        if all(i in self.blocks for i in range(start // bs, (end - 1) // bs + 1)):
            return self._cached(start, end)
        for a, data in self.pieces.items():  # few: one per batch of small values read
            if a <= start and end <= a + len(data):
                return data[start - a : end - a]
        return None


def _raise_failed(failed: list[tuple[int, BaseException]], parts: list[tuple[int, int]], path: str) -> None:
    """The error of parts that could not be fetched (a lasting failure first)."""
    e = next((e for _, e in failed if not is_transient(e)), failed[0][1])
    if isinstance(e, FileNotFoundError):
        raise SourceError(f"file not found ({e})", file=path) from e
    if isinstance(e, SourceError):
        raise e
    where = ", ".join(f"{parts[i][0]}-{parts[i][1]}" for i, _ in failed[:8])
    raise SourceError(f"could not read bytes {where}: {e}", file=path) from e


def serves_ranges(cache: BlockCache) -> bool:
    """Does the server answer a range request with that range, not the whole file?  True once a part
    came as asked (or with status 206: refindex's own HTTP requests), False once the whole file came
    instead; when every request asked for all of a small file, one byte is asked for to see what comes."""
    if cache.ranges_served is None:
        if getattr(cache.fs, "served_a_part", lambda _: False)(cache.path) or cache.size < 2:
            cache.ranges_served = True
        else:
            cache.fetch_now(0, 1)  # (judged on the way)
    return bool(cache.ranges_served)


def _judge_ranges(cache: BlockCache, data: bytes, start: int, end: int) -> None:
    """What the answer ``data`` to a request for ``start:end`` tells of ``cache.ranges_served``."""
    if len(data) == end - start < cache.size:
        cache.ranges_served = True
    elif len(data) > end - start:
        cache.ranges_served = False


def distinct_bytes(cache: BlockCache) -> int:
    """How many different bytes of the file ``cache`` holds: what its requests brought, each byte once
    (a small file's head and tail requests, asked before its size is known, both bring all of it)."""
    bs = cache.opts.block_size
    spans = sorted([(i * bs, i * bs + len(b)) for i, b in cache.blocks.items()] +
                   [(a, a + len(d)) for a, d in cache.pieces.items()])
    total, reach = 0, 0
    for a, b in spans:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def held_bytes(cache: BlockCache) -> tuple[list[int], list[int], bytes]:
    """Every byte ``cache`` holds, as sorted disjoint spans (starts, ends) and their bytes one after
    another: its blocks, and the pieces kept while recording where no block has them."""
    bs = cache.opts.block_size
    spans: list[tuple[int, bytes]] = []
    run: list[int] = []
    for i in sorted(cache.blocks):
        if run and i != run[-1] + 1:
            spans.append((run[0] * bs, b"".join(cache.blocks[j] for j in run)))
            run = []
        run.append(i)
    if run:
        spans.append((run[0] * bs, b"".join(cache.blocks[j] for j in run)))
    spans += cache.pieces.items()
    starts: list[int] = []
    ends: list[int] = []
    datas: list[bytes] = []
    for a, data in sorted(spans, key=lambda s: (s[0], -len(s[1]))):
        end = a + len(data)
        if ends and end <= ends[-1]:
            continue  # held whole by the spans before it
        cut = max(0, ends[-1] - a) if ends else 0
        datas.append(data[cut:] if cut else data)
        if ends and a + cut == ends[-1]:  # adjoining: one span
            ends[-1] = end
        else:
            starts.append(a + cut)
            ends.append(end)
    return starts, ends, b"".join(datas)


def _paged(starts: list[int], lengths: list[int], page: int, size: int) -> tuple[list[int], list[int]]:
    """Each range widened to whole pages of ``page`` bytes (the last page ends at ``size``)."""
    lo = [(s // page) * page for s in starts]
    return lo, [min(size, -(-(s + n) // page) * page) - a for s, n, a in zip(starts, lengths, lo)]


def merge_ranges(offsets: list[int], sizes: list[int], max_gap: int = 64 << 10,
                 max_span: int = 64 << 20) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Byte ranges merged where they lie close: (spans, and per input range its (span, offset in span)).

    A gap of ``max_gap`` bytes costs less to transfer than a request costs to wait for;
    no span grows beyond ``max_span``.
    """
    order = sorted(range(len(offsets)), key=offsets.__getitem__)
    spans: list[tuple[int, int]] = []
    where: list[tuple[int, int]] = [(0, 0)] * len(offsets)
    for i in order:
        start, end = offsets[i], offsets[i] + sizes[i]
        if spans and start - spans[-1][1] <= max_gap and end - spans[-1][0] <= max_span:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
        where[i] = (len(spans) - 1, start - spans[-1][0])
    return spans, where
