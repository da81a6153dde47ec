"""The file object libhdf5 reads through on the h5py road.

h5py's file-object driver calls ``seek``/``readinto`` for every read libhdf5 makes.  Each
read is served, in this order:

1. from the index's pages (the metadata the scan read: opening objects, attributes,
   small values) — no request;
2. from chunks fetched ahead (:class:`ReadAhead`): when a read is a chunk the index knows,
   that chunk is fetched and, in the same round trip, the chunks libhdf5 will ask for
   next.  Those are known exactly when the read comes from h5py's ``Dataset.__getitem__``
   or ``read_direct`` (:mod:`._selection` reads the selection off the thread's stack and
   the index's grid says which stored chunks it touches): they are all fetched at once
   (up to :data:`PLAN_AHEAD` bytes, topped up as they are read), nothing more.  Otherwise
   they are guessed: the following ones of that array, or every ``stride``-th when the
   reads skip, a window that doubles while the reads keep in step.  Either way decoding
   overlaps the transfer: each chunk is served as soon as its own request has arrived;
3. from the nodes of a chunk index too large to carry in the pages: all of its nodes are
   fetched in one round trip the first time a read needs one of them, and with them, in
   the same round trip, the chunks the selection in progress needs (known as in 2.);
4. otherwise from the source: large reads as they are (in parts side by side), small ones
   through the block cache scans use (a block and the blocks after it).

Everything fetched goes through :mod:`refindex.source` (retries, counts).
"""

from __future__ import annotations

import threading
from bisect import bisect_right, insort
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import SourceError
from ...isolation.gcpause import held_collections, held_while_fetching
from ...model import Pages
from ...options import FetchOptions
from ...source import MAX_PARTS, BlockCache, RangeFetcher, ReadOnlyFile, ReadStats, merge_ranges
from ._chunks import ChunkMap, ChunkRun
from ._selection import selection_in_progress, wanted_chunks
from ._served import PageMap

# bytes fetched ahead beside an array's first chunk read: libhdf5 decodes gzip chunks at ~150 MB/s
# and the next window takes a round trip and its transfer (~60 ms on the latency store): 4 MiB left
# libhdf5 waiting in P3's read; 8 MiB overshot a 12.8 MB read by 8 MiB (issue 44's bound: 1.5x)
FIRST_AHEAD = 6 << 20
MAX_AHEAD = 64 << 20  # the read-ahead window grows up to this many bytes
# ... and up to this share of what libhdf5 read of the array so far: where its reads stop (the end of a
# selection, which the file object cannot see), what was fetched and not read stays under half of what
# was (issue 44: a window of 12.8 MB fetched 38 MB while the window doubled to 32 MiB)
AHEAD_SHARE = 0.45
# a selection known (h5py's call in progress): this many bytes of its chunks are held fetched ahead, topped
# up when half of them have been read, in up to PLAN_PARTS requests side by side (a part of 2 MiB at most
# arrives ~70 ms after it was asked for on the latency store: the first chunks are not long waited for).
# Chunks libhdf5 decodes (~150 MB/s for gzip, in the reading thread) are fetched in step with the decoding
# instead: FIRST_AHEAD first, then twice what was read (P3's 16.5 MB series read slower when all of it
# travelled at once, its transfer's threads taking the CPU the decoding needed)
PLAN_AHEAD = 64 << 20
PLAN_PARTS = 32
# an array's first selection smaller than this also brings the chunks that follow it, up to this many bytes in
# all, in the same round trip: a first look (a notebook's first plot) is mostly followed by more of the same
# series (P4's whole ElectricalSeries right after its first 10,000 samples: without it, a round trip more and
# 0.05-0.06 s); a selection at least this large brings only its own chunks (P10's window: 1.01x the bytes)
FIRST_LOOK = FIRST_AHEAD
NODE_MARGIN = 1 << 20  # nodes of a left-out chunk index this near a selection's first chunks come with them
DIRECT_ABOVE = 256 << 10  # reads this large bypass the block cache
INDEX_FETCH_MAX = 16 << 20  # a left-out chunk index fetched whole up to this many bytes
BUFFER_MAX = 256 << 20  # chunks held fetched-ahead at most (oldest dropped first)
READS_ELSEWHERE = ("libhdf5 reads these virtual datasets from other files, which h5py's file-object driver cannot "
                   "open: here they read as fill values (or with no elements, where a mapping is unlimited). "
                   "refindex.open reads them through the index")
EXTERNAL_LINKS = ("h5py's file-object driver cannot follow an external link: libhdf5 would look for the target "
                  "inside this same file (or recurse until it fails). Open the linked file with "
                  "refindex.h5py_file itself, or read with refindex.open_nwb(..., reader='zarr'), which follows "
                  "external links through the linked files' indexes")


@dataclass
class RoadStats:
    """What the file object served from where (tests and benchmarks count requests here)."""

    reads: int = 0
    from_pages: int = 0
    from_ahead: int = 0
    from_source: int = 0
    fetch: ReadStats = field(default_factory=ReadStats)
    missed: list[tuple[int, int]] = field(default_factory=list)  # the first reads the source served

    def as_dict(self) -> dict[str, Any]:
        return {"reads": self.reads, "from_pages": self.from_pages, "from_ahead": self.from_ahead,
                "from_source": self.from_source, **self.fetch.as_dict()}


@dataclass
class _Lane:
    """One array's read-ahead: where it stands and how far it looks."""

    last: int = -1
    stride: int = 1
    frontier: int = 0  # the next chunk not scheduled yet
    window: int = FIRST_AHEAD
    read: int = 0  # bytes of the array's chunks libhdf5 has read

    def ahead(self) -> int:
        """Bytes to hold fetched ahead of the reads: the window, at most AHEAD_SHARE of what was read."""
        return min(self.window, max(FIRST_AHEAD, int(self.read * AHEAD_SHARE)))


@dataclass
class _Plan:
    """The chunks an h5py read in progress needs, in the order libhdf5 reads them (``._selection``)."""

    key: Any  # the h5py call it was made for
    ks: np.ndarray  # their places in the array's run, ascending
    paced: bool = False  # chunks libhdf5 decodes: fetched in step with the reads
    at: int = 0  # the first of ``ks`` not scheduled yet
    ahead: int = 0  # bytes scheduled and not read yet
    read: int = 0  # bytes of them read

    def window(self) -> int:
        """Bytes to hold fetched ahead (see PLAN_AHEAD)."""
        return min(PLAN_AHEAD, max(FIRST_AHEAD, 2 * self.read)) if self.paced else PLAN_AHEAD

    def holds(self, k: int) -> bool:
        i = int(np.searchsorted(self.ks, k))
        return i < len(self.ks) and int(self.ks[i]) == k


@dataclass
class _Nodes:
    """The nodes of a left-out chunk index not fetched yet (``spans``, sorted) and the one libhdf5 asks for
    (``asked``); once fetched beside a selection's first chunks, those near their bytes (most share their
    requests: libhdf5 writes a leaf beside the chunks it indexes), the one asked for, and those written
    together with another (a B-tree's root splits in two: its inner nodes lie side by side, far from
    the chunks), each as (start, end, future of its bytes).  The others wait until libhdf5 asks."""

    spans: list[tuple[int, int]]
    asked: int
    fetched: list[tuple[int, int, Future]] = field(default_factory=list)
    taken: set[int] = field(default_factory=set)

    def near(self, lo: int, hi: int) -> list[int]:
        """The places of the spans within NODE_MARGIN of ``[lo, hi)``, of those longer than most (nodes
        side by side), and of the one asked for."""
        lengths = np.asarray([b - a for a, b in self.spans])
        long = 1.5 * float(np.median(lengths))
        out = [j for j, (a, b) in enumerate(self.spans)
               if lo - NODE_MARGIN <= a and b <= hi + NODE_MARGIN or b - a > long or j == self.asked]
        return out

    def left(self) -> list[tuple[int, int]]:
        return [span for j, span in enumerate(self.spans) if j not in self.taken]


def first_look(run: ChunkRun, ks: np.ndarray) -> np.ndarray:
    """An array's first selection's chunks ``ks``, and after them the array's next ones up to FIRST_LOOK bytes
    in all (none when the selection holds that much)."""
    budget = FIRST_LOOK - int(run.sizes[ks].sum()) if len(ks) else 0
    if budget <= 0:
        return ks
    after = np.arange(int(ks[-1]) + 1, len(run.sizes))
    more = after[: int(np.searchsorted(np.cumsum(run.sizes[after]), budget, side="right")) + 1]
    return np.concatenate([ks, more]).astype(ks.dtype, copy=False)


class ReadAhead:
    """Chunks fetched before libhdf5 asks for them (see the module docstring)."""

    def __init__(self, fetcher: RangeFetcher, chunks: ChunkMap):
        self.fetcher = fetcher
        self.chunks = chunks
        self.starts: list[int] = []  # buffered chunk starts, sorted
        self.buffers: dict[int, tuple[int, Future, str, int]] = {}  # chunk start -> (end, its bytes, path, k)
        self.held = 0
        self.lanes: dict[str, _Lane] = {}
        self.plans: dict[str, _Plan] = {}
        self.looked: set[str] = set()  # arrays whose first selection was planned (see FIRST_LOOK)

    def read(self, start: int, end: int) -> bytes | memoryview | None:
        """The bytes ``start:end`` when they are (or can be) read ahead; None: not a known chunk."""
        hit = self._buffered(start, end)
        if hit is not None:
            data, path, k, whole = hit
            self._advance(path, k, whole)
            return data
        found = self.chunks.find(start, end)
        if found is None:
            return None
        run, k = found
        own = self.fetcher.start([(start, int(run.offsets[k] + run.sizes[k]))], waited=True)  # in parts
        if not self.plan(run.path, k):
            lane = self.lanes.setdefault(run.path, _Lane())
            self._step(lane, k)
            lane.read += int(run.sizes[k])
            lane.frontier = k + lane.stride
            self._schedule(run, lane, lane.ahead())
        return own.result()[0][: end - start]

    def planned(self, path: str) -> bool:
        """Has the h5py read in progress had its chunks of ``path`` planned already?"""
        p = self.plans.get(path)
        found = selection_in_progress() if p is not None else None
        return found is not None and found[0] == p.key

    def plan(self, path: str, k: int | None = None, nodes: "_Nodes | None" = None) -> bool:
        """Fetch ahead the chunks of ``path`` that the h5py read in progress needs (after chunk ``k``, being
        fetched now); False when they are not known, or ``k`` is not among them.  ``nodes``: the
        array's chunk index nodes to fetch, in the same round trip as the first chunks."""
        run = self.chunks.run(path)
        found = selection_in_progress() if run is not None and run.grid is not None else None
        if found is None:
            self.plans.pop(path, None)
            return False
        key, args = found
        p = self.plans.get(path)
        if p is None or p.key != key or (k is not None and not p.holds(k)):
            places = wanted_chunks(args, run.grid.shape, run.grid.chunks)
            p = _Plan(key, run.grid.runs_of(places), run.grid.encoded) if places is not None else None
            if p is None or (k is not None and not p.holds(k)):
                self.plans.pop(path, None)
                return False
            if path not in self.looked:
                self.looked.add(path)
                p.ks = first_look(run, p.ks)
            self.plans[path] = p
        if k is not None:  # the chunk asked for is being fetched: the plan goes on after it
            p.at = max(p.at, int(np.searchsorted(p.ks, k)) + 1)
        self._schedule_plan(run, p, p.window() - p.ahead, nodes)
        return True

    def _schedule_plan(self, run: ChunkRun, p: _Plan, budget: int, nodes: "_Nodes | None" = None) -> None:
        picks: list[int] = []
        total = 0
        while p.at < len(p.ks) and total < budget and self.held + total < BUFFER_MAX:
            k = int(p.ks[p.at])
            p.at += 1
            if int(run.offsets[k]) not in self.buffers:
                picks.append(k)
                total += int(run.sizes[k])
        p.ahead += total
        self._start(run, picks, nodes)

    def _buffered(self, start: int, end: int) -> tuple[bytes | memoryview, str, int, bool] | None:
        i = bisect_right(self.starts, start) - 1
        if i < 0:
            return None
        b_start = self.starts[i]
        b_end, fut, path, k = self.buffers[b_start]
        if end > b_end:
            return None
        try:
            whole = fut.result()
        except Exception:  # noqa: BLE001 - a failed read-ahead: the read goes to the source, which reports errors
            self._drop(b_start)
            return None
        if start == b_start and end == b_end:  # libhdf5 read the chunk: it will not ask again
            self._drop(b_start)
            return whole, path, k, True
        return whole[start - b_start: end - b_start], path, k, False

    def _drop(self, start: int) -> None:
        end = self.buffers.pop(start)[0]
        self.starts.remove(start)
        self.held -= end - start

    def _step(self, lane: _Lane, k: int) -> None:
        if lane.last >= 0 and k > lane.last:
            stride = k - lane.last
            if stride != lane.stride:
                lane.stride, lane.window = stride, FIRST_AHEAD
            else:
                lane.window = min(MAX_AHEAD, 2 * lane.window)
        lane.last = k

    def _advance(self, path: str, k: int, whole: bool = True) -> None:
        run = self.chunks.runs.get(path)
        p = self.plans.get(path)
        if p is not None and run is not None and p.holds(k):
            if whole:
                p.ahead = max(0, p.ahead - int(run.sizes[k]))
                p.read += int(run.sizes[k])
            if p.ahead < p.window() // 2 and p.at < len(p.ks):
                self._schedule_plan(run, p, p.window() - p.ahead)
            return
        lane = self.lanes.get(path)
        if lane is None or run is None:
            return
        self._step(lane, k)
        lane.read += int(run.sizes[k])
        scheduled = int(run.sizes[k + lane.stride: lane.frontier: lane.stride].sum())
        ahead = lane.ahead()
        if scheduled < ahead * 3 // 4:  # topped up often (the pipe stays full), to the window, not beyond it
            self._schedule(run, lane, ahead - scheduled)

    def _schedule(self, run: ChunkRun, lane: _Lane, budget: int) -> None:
        """Start fetching the next ``budget`` bytes of chunks, from ``lane.frontier`` on."""
        n = len(run.offsets)
        picks: list[int] = []
        total = 0
        k = lane.frontier
        while 0 <= k < n and total < budget and self.held + total < BUFFER_MAX:
            if int(run.offsets[k]) not in self.buffers:
                picks.append(k)
                total += int(run.sizes[k])
            k += lane.stride
        lane.frontier = k
        self._start(run, picks)

    def _start(self, run: ChunkRun, picks: list[int], nodes: "_Nodes | None" = None) -> None:
        """Fetch chunks ``picks`` of ``run`` as one round trip, each buffered as its request arrives;
        with them the ``nodes`` near their bytes (``nodes.fetched`` then holds them)."""
        offsets = [int(run.offsets[i]) for i in picks]
        ends = [o + int(run.sizes[i]) for i, o in zip(picks, offsets)]
        near = nodes.near(min(offsets, default=0), max(ends, default=0)) if nodes is not None and not nodes.taken else []
        extra = [nodes.spans[j] for j in near] if nodes is not None else []
        if not picks and not extra:
            return
        futures = held_while_fetching(self.fetcher.start_each, extra + list(zip(offsets, ends)),
                                      PLAN_PARTS if run.path in self.plans else MAX_PARTS)  # refindex.gcpause
        if extra:
            nodes.fetched = [(a, b, fut) for (a, b), fut in zip(extra, futures)]
            nodes.taken = set(near)
            futures = futures[len(extra):]
        for i, o, e, fut in zip(picks, offsets, ends, futures):
            self.buffers[o] = (e, fut, run.path, i)
            insort(self.starts, o)
            self.held += e - o


class IndexedFile(ReadOnlyFile):
    """A read-only file for h5py's file-object driver: pages first, then the source (module docstring)."""

    def __init__(self, name: str, size: int, pages: Pages | None, fetcher: RangeFetcher,
                 chunks: ChunkMap | None = None, cache: FetchOptions | None = None):
        super().__init__()
        self.name = name
        self.size = int(size)
        self.pos = 0
        self.pages = PageMap(pages)
        self.fetcher = fetcher
        self.stats = RoadStats(fetch=fetcher.stats)
        self.ahead = ReadAhead(fetcher, chunks or ChunkMap({}, None))
        self._index_ranges = dict(pages.index_ranges) if pages is not None else {}
        self._fetched_index = PageMap(None)
        self._fetched: list[tuple[int, int, Any]] = []  # index nodes fetched: (start, end, bytes or their future)
        self._asked_again: dict[str, int] = {}  # path -> nodes asked for, one at a time, since its plan
        self._cache: BlockCache | None = None
        self._cache_options = cache or FetchOptions(first_read=0, tail_read=0, whole_file_max=0,
                                                    prefetch_metadata=False)
        self._lock = threading.Lock()
        # libhdf5 asks for the end of the file (seek to the end) only while it opens a file; once
        # this one is open, that means an external link is being followed through it (see
        # EXTERNAL_LINKS): refused, so the link fails loudly instead of resolving into this file.
        self.refuse_reopen = bool(pages is not None and pages.external_links)
        self.opened = False

    def __repr__(self) -> str:
        return self.name  # libhdf5 names the file after it: a local file's external links resolve beside it

    # io.RawIOBase (the rest: ReadOnlyFile) --------------------------------------
    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 2 and self.opened and self.refuse_reopen:
            raise OSError(EXTERNAL_LINKS)
        return super().seek(offset, whence)

    def readinto(self, b) -> int:
        """libhdf5's every read (thousands while pynwb opens a file).  ``b`` is h5py's Cython view of
        libhdf5's buffer, written through a plain ``memoryview`` (0.7 us a read instead of 2.8)."""
        start = self.pos
        end = min(self.size, start + len(b))
        if end <= start:
            return 0
        data = self.read_range(start, end)
        n = len(data)
        memoryview(b).cast("B")[:n] = data
        self.pos = start + n
        return n

    def close(self) -> None:
        if not self.closed:
            self.fetcher.close()
        super().close()

    # serving ---------------------------------------------------------------------
    def read_range(self, start: int, end: int) -> bytes | memoryview:
        self.stats.reads += 1
        data = self.pages.get(start, end)
        if data is not None:
            self.stats.from_pages += 1
            return data
        with self._lock, held_collections():  # libhdf5 waits with h5py's lock held (refindex.gcpause)
            data = self.ahead.read(start, end)
            if data is not None:
                self.stats.from_ahead += 1
                return data
            self.stats.from_source += 1
            if len(self.stats.missed) < 100:
                self.stats.missed.append((start, end))
            return self._from_source(start, end)

    def _from_source(self, start: int, end: int) -> bytes:
        data = self._from_left_out_index(start, end)
        if data is not None:
            return data
        if self.fetcher.local or self.fetcher.cuts_from_whole or end - start >= DIRECT_ABOVE:
            return self.fetcher.fetch([(start, end)])[0]
        if self._cache is None:
            self._cache = BlockCache(self.fetcher.fs, self.fetcher.path, self.size, self._cache_options,
                                     self.fetcher.stats)
        return self._cache.read_range(start, end)

    def _from_left_out_index(self, start: int, end: int) -> bytes | None:
        """A node of a chunk index the pages left out: fetched with the chunks the selection in progress
        needs and the nodes near them (libhdf5's walk to those chunks), else the whole index at once."""
        for lo, hi, data in self._fetched:
            if lo <= start and end <= hi:
                data = data.result() if isinstance(data, Future) else data
                return data[start - lo: end - lo]
        for path, (starts, ends) in list(self._index_ranges.items()):
            i = int(np.searchsorted(starts, start, side="right")) - 1
            if i < 0 or end > int(ends[i]):
                continue
            spans, _ = merge_ranges(starts.tolist(), (ends - starts).tolist(), max_gap=64 << 10)
            j = next(j for j, (a, b) in enumerate(spans) if a <= start and end <= b)
            again = self._asked_again.get(path, 0) if self.ahead.planned(path) else -1
            nodes = _Nodes(spans, j)
            if again < 0 and self.ahead.plan(path, nodes=nodes) and nodes.fetched:
                self._fetched += nodes.fetched
                self._asked_again[path] = 0
                self._keep_left(path, nodes.left())
                return self._from_left_out_index(start, end)
            if again == 0:  # a node the plan's did not hold (an inner node of the tree): it alone, this once
                self._asked_again[path] = 1
                self._fetched.append((*spans[j], self.fetcher.fetch([spans[j]])[0]))
                self._keep_left(path, spans[:j] + spans[j + 1:])
                return self._from_left_out_index(start, end)
            del self._index_ranges[path]
            keep = self._nearest(starts, ends, i)
            spans, _ = merge_ranges(starts[keep].tolist(), (ends[keep] - starts[keep]).tolist(), max_gap=64 << 10)
            fetched = held_while_fetching(self.fetcher.start_each, spans)
            self.ahead.plan(path)  # the chunks libhdf5 will read next travel beside the nodes it reads first
            for (a, b), fut in zip(spans, fetched):
                self._fetched.append((a, b, fut.result()))
            return self._from_left_out_index(start, end)
        return None

    def _keep_left(self, path: str, spans: list[tuple[int, int]]) -> None:
        """The nodes of ``path`` not fetched yet: fetched when libhdf5 asks for one of them."""
        if spans:
            self._index_ranges[path] = (np.asarray([a for a, _ in spans], np.int64),
                                        np.asarray([b for _, b in spans], np.int64))
        else:
            del self._index_ranges[path]

    @staticmethod
    def _nearest(starts: np.ndarray, ends: np.ndarray, i: int) -> np.ndarray:
        """The index nodes fetched together: all of them up to INDEX_FETCH_MAX bytes, else those
        nearest to node ``i``."""
        sizes = ends - starts
        if int(sizes.sum()) <= INDEX_FETCH_MAX:
            return np.arange(len(starts))
        mean = max(1, int(sizes.mean()))
        half = max(1, INDEX_FETCH_MAX // mean // 2)
        return np.arange(max(0, i - half), min(len(starts), i + half))


def check_size(name: str, size: int, pages: Pages | None) -> None:
    """The pages were made from a file of another size: the index does not describe this file."""
    if pages is not None and pages.file_size != size:
        raise SourceError(f"the index's pages describe a file of {pages.file_size} bytes, not {size}", file=name)
