"""What every chunk-index reader shares: the facts it starts from, reads a level at a time, and
vectorised decoding of little-endian fields from node bytes.

Readers never guess: anything that does not fit what libhdf5 writes raises :class:`Unparsed`
(the scan then asks libhdf5's ``chunk_iter`` and records why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ._lookup3 import checksums_ok

# (absolute offsets, sizes) -> the bytes of each range, through the source layer (merged, concurrent, retried)
Fetch = Callable[[list[int], list[int]], list[bytes]]

BATCH_BYTES = 16 << 20  # node bytes fetched and decoded at a time: memory stays bounded for 10^7 chunks
MERGE_GAP = 64 << 10  # structures this close are fetched as one range (a gap costs less than a request)


class Unparsed(Exception):
    """The native reader does not read this index (an unexpected field, a checksum mismatch, ...)."""

    def __init__(self, reason: str, index: str = "unknown"):
        super().__init__(reason)
        self.reason = reason
        self.index = index


@dataclass(frozen=True)
class FileFacts:
    """Of the whole file: sizes of addresses and lengths, where relative addresses start, its size."""

    sizeof_addr: int
    sizeof_size: int
    base: int  # absolute offset of relative address 0 (the superblock's, after any user block)
    eof: int  # the file's size in bytes
    istore_k: int = 32  # version 1 chunk B-trees hold up to 2K children per node

    @property
    def undefined(self) -> int:
        """HDF5's undefined address: every bit of ``sizeof_addr`` bytes set."""
        return (1 << (8 * self.sizeof_addr)) - 1


@dataclass(frozen=True)
class DatasetFacts:
    """Of one chunked dataset, as libhdf5 reports them (h5py), to check the layout message against."""

    path: str
    header: int  # relative address of its object header
    shape: tuple[int, ...]
    maxshape: tuple[int | None, ...]  # None: unlimited
    chunks: tuple[int, ...]  # chunk shape, one entry per dimension
    itemsize: int | None  # bytes of an element as stored; None: take the layout message's (variable-length types)
    filtered: bool  # a filter pipeline with at least one filter

    @property
    def chunk_bytes(self) -> int:
        return int(np.prod(self.chunks, dtype=np.int64)) * int(self.itemsize or 0)

    def grid(self, extent: tuple[int | None, ...]) -> np.ndarray:
        """Chunks per dimension for ``extent`` (the current shape or, when fixed, the maximum one)."""
        return np.asarray([-(-int(n) // c) for n, c in zip(extent, self.chunks)], np.int64)


@dataclass
class Listing:
    """A dataset's stored chunks as numpy columns, in the order ``chunk_iter`` visits them."""

    coords: np.ndarray  # (n, rank) int64 chunk-grid positions
    offsets: np.ndarray  # uint64 absolute byte offsets
    sizes: np.ndarray  # uint64 stored sizes
    masks: np.ndarray  # uint32 filter masks (filters skipped)

    @classmethod
    def empty(cls, rank: int) -> "Listing":
        return cls(np.zeros((0, rank), np.int64), np.zeros(0, np.uint64), np.zeros(0, np.uint64),
                   np.zeros(0, np.uint32))

    @classmethod
    def concat(cls, parts: list["Listing"], rank: int) -> "Listing":
        if not parts:
            return cls.empty(rank)
        if len(parts) == 1:
            return parts[0]
        return cls(np.concatenate([p.coords for p in parts]).reshape(-1, rank),
                   np.concatenate([p.offsets for p in parts]), np.concatenate([p.sizes for p in parts]),
                   np.concatenate([p.masks for p in parts]))

    def __len__(self) -> int:
        return int(self.offsets.shape[0])


def chunk_size_width(chunk_bytes: int) -> int:
    """Bytes libhdf5 gives the size field of a filtered chunk record (fixed/extensible arrays, v2 B-trees)
    under a version 4 layout: enough for the unfiltered chunk size plus one byte of growth, at most 8.
    (A version 5 layout, HDF5 2.0, gives it the file's size of lengths.)"""
    return min(8, 1 + (max(chunk_bytes, 1).bit_length() - 1 + 8) // 8)


def uint(rows: np.ndarray, start: int, width: int) -> np.ndarray:
    """The little-endian unsigned integer of ``width`` bytes at ``start`` of every row (uint64[n])."""
    n = rows.shape[0]
    if start < 0 or start + width > rows.shape[1] or not 1 <= width <= 8:
        raise Unparsed(f"a field at {start}+{width} lies outside a {rows.shape[1]}-byte structure")
    if width == 8:
        return np.ascontiguousarray(rows[:, start:start + 8]).view("<u8").reshape(n).astype(np.uint64, copy=False)
    wide = np.zeros((n, 8), np.uint8)
    wide[:, :width] = rows[:, start:start + width]
    return wide.view("<u8").reshape(n).astype(np.uint64, copy=False)


def signature_ok(rows: np.ndarray, magic: bytes) -> np.ndarray:
    """Per row: does it start with ``magic``?"""
    want = np.frombuffer(magic, np.uint8)
    return (rows[:, :len(want)] == want).all(axis=1) if rows.shape[1] >= len(want) else np.zeros(len(rows), bool)


def unravel(index: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """C-order grid positions ``(n, rank)`` of linear chunk numbers over a grid of ``grid`` chunks per dimension;
    the first dimension is not bounded (an unlimited one)."""
    index = np.asarray(index, np.uint64)
    rank = len(grid)
    out = np.empty((len(index), rank), np.int64)
    rest = index
    for i in range(rank - 1, 0, -1):
        g = np.uint64(max(int(grid[i]), 1))
        out[:, i] = (rest % g).astype(np.int64)
        rest = rest // g
    if rank:
        out[:, 0] = rest.astype(np.int64)
    return out


class Reader:
    """Structures of one file, fetched through the source layer: a level's nodes in one call."""

    def __init__(self, fetch: Fetch, facts: FileFacts, index: str):
        self.fetch = fetch
        self.facts = facts
        self.index = index
        self.rounds = 0  # fetch calls: each is one wait (its ranges are fetched concurrently)
        self.nbytes = 0
        self.size_width = 0  # bytes of a filtered chunk's size field in index records (see read_chunk_index)

    def fail(self, reason: str) -> Unparsed:
        return Unparsed(reason, self.index)

    def defined(self, addrs: np.ndarray) -> np.ndarray:
        return np.asarray(addrs, np.uint64) != np.uint64(self.facts.undefined)

    def rows(self, addrs: np.ndarray, size: int, what: str) -> np.ndarray:
        """``(n, size)`` bytes at each relative address (one fetch for them all)."""
        return self.rows_sized(addrs, np.full(len(addrs), size, np.int64), size, what)

    def rows_sized(self, addrs: np.ndarray, sizes: np.ndarray, width: int, what: str) -> np.ndarray:
        """``(n, width)`` matrix of ``sizes[i]`` bytes at each relative address, zero padded (one fetch).

        Structures close to each other (gaps up to :data:`MERGE_GAP`) are fetched as one range and cut
        out of it with one numpy gather: a level of 10^4 nodes costs a few ranges, not 10^4 byte strings.
        """
        addrs = np.asarray(addrs, np.uint64)
        sizes = np.asarray(sizes, np.int64)
        if not len(addrs):
            return np.zeros((0, width), np.uint8)
        if not self.defined(addrs).all():
            raise self.fail(f"a {what} at the undefined address")
        start = addrs + np.uint64(self.facts.base)
        if (start < addrs).any() or (start + sizes.astype(np.uint64) > np.uint64(self.facts.eof)).any():
            raise self.fail(f"a {what} lies beyond the end of the file")
        if (sizes <= 0).any() or int(sizes.max()) > width:
            raise self.fail(f"a {what} of an unexpected size")
        start = start.astype(np.int64)
        order = np.argsort(start, kind="stable")
        lo, hi = start[order], start[order] + sizes[order]
        reach = np.maximum.accumulate(hi)
        new = np.ones(len(lo), bool)
        new[1:] = lo[1:] - reach[:-1] > MERGE_GAP
        first = np.nonzero(new)[0]
        span_lo = lo[first]
        span_hi = np.maximum.reduceat(hi, first)
        datas = self.fetch(span_lo.tolist(), (span_hi - span_lo).tolist())
        self.rounds += 1
        self.nbytes += int(sizes.sum())
        if any(len(d) != int(n) for d, n in zip(datas, (span_hi - span_lo).tolist())):
            raise self.fail(f"a short read of a {what}")
        span_of = np.cumsum(new) - 1  # per sorted row: its span
        # The spans side by side in one buffer: each row's bytes start at its span's place there plus
        # its offset in the span (one gather for a level of 10^4 nodes, not a numpy call per span).
        buf = np.frombuffer(b"".join(datas), np.uint8)
        span_at = np.concatenate([[0], np.cumsum(span_hi - span_lo)[:-1]])
        at = span_at[span_of] + (lo - span_lo[span_of])
        out = np.zeros((len(addrs), width), np.uint8)
        if bool((sizes == width).all()):  # every row a window of the buffer: a gather from a strided view
            out[order] = np.lib.stride_tricks.sliding_window_view(buf, width)[at]
        else:
            for r, o, n in zip(order.tolist(), at.tolist(), sizes[order].tolist()):
                out[r, :n] = buf[o:o + n]
        return out

    def one(self, addr: int, size: int, what: str) -> np.ndarray:
        """The ``size`` bytes of one structure, as a ``(1, size)`` matrix."""
        return self.rows(np.asarray([addr], np.uint64), size, what)

    def header(self, addr: int, size: int, what: str, magic: bytes, kind: int, refused: str) -> np.ndarray:
        """A chunk index's header, as :meth:`one` reads it, once its signature ``magic``, version 0, type
        (or client) byte ``kind`` and closing checksum are right: HDF5's v2 B-tree, fixed and extensible
        array headers all begin so.  Else :class:`Unparsed` saying ``refused``."""
        h = self.one(addr, size, what)
        if not signature_ok(h, magic)[0] or h[0, 4] != 0 or h[0, 5] != kind \
                or not checksums_ok(h, np.asarray([size - 4]))[0]:
            raise self.fail(refused)
        return h


def batches(n: int, row_bytes: int) -> list[slice]:
    """Slices of ``n`` rows of ``row_bytes`` each, about :data:`BATCH_BYTES` at a time."""
    step = max(1, BATCH_BYTES // max(row_bytes, 1))
    return [slice(lo, min(n, lo + step)) for lo in range(0, n, step)]
