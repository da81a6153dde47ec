"""A content fingerprint of the bytes an index depends on, recorded at scan time.

An index is right about its source as long as the bytes it was made from are where they
were: the superblock and root group (the file's head), what libhdf5 flushed last (its
tail), every object's header (names, layouts: the addresses of the data), the roots of the
chunk indexes, and the bytes copied into the index (small chunks).  Referenced chunks are
read from the file itself, so a change inside them is no harm; a change of the structure
that says where they are is.

Validators (ETag, version id, mtime) are the cheap test, but a server may send none, and a
re-upload of the same bytes changes them all; then the fingerprint decides.  It is a
blake2b digest over a few *spans* of the file, at most :data:`MAX_SPANS` of them and
:data:`MAX_BYTES` in all, so checking it costs one round trip of small reads.  The spans
are chosen from what the scan already read (nothing is fetched for it): both ends always,
then headers, chunk-index roots and copied bytes, each kind sampled evenly over the file
when there are more than the budget holds (``complete`` is then false).

Recorded as ``{"algorithm", "spans": [[start, end], ...], "digest", "complete"}`` in
``refs["refindex"]["source"]["fingerprint"]``.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

ALGORITHM = "blake2b-128"
END_BYTES = 64 << 10  # of the head and of the tail
HEADER_WINDOW = 512  # bytes of each object header (prefix, dataspace, type, layout messages)
INDEX_WINDOW = 2 << 10  # bytes of each chunk index root node
COPIED_MAX = 4 << 10  # bytes of each range copied into the index
MAX_SPANS = 48
MAX_BYTES = 1 << 20
MAX_CANDIDATES = 1024  # pieces of one kind tried at most (an even sample of more)

# Kinds of pieces, in the order the budget is spent on them.
ENDS, HEADERS, INDEXES, COPIED = range(4)

Known = Callable[[int, int], bytes]  # (start, end) -> the bytes from start that are at hand (maybe fewer)


def digest(spans: Sequence[tuple[int, int]], datas: Iterable[bytes]) -> str:
    """The digest of ``spans`` holding ``datas`` (their places are part of it)."""
    h = hashlib.blake2b(digest_size=16)
    for (start, end), data in zip(spans, datas):
        h.update(struct.pack("<QQ", start, end))
        h.update(data)
    return h.hexdigest()


def recorded_spans(fingerprint: Any) -> list[tuple[int, int]] | None:
    """The spans of a recorded fingerprint, or None when it is not one this version can check."""
    if not isinstance(fingerprint, dict) or fingerprint.get("algorithm") != ALGORITHM:
        return None
    spans = fingerprint.get("spans")
    if not isinstance(spans, list) or not isinstance(fingerprint.get("digest"), str):
        return None
    out = []
    for span in spans:
        if not (isinstance(span, list) and len(span) == 2 and all(isinstance(v, int) for v in span)
                and 0 <= span[0] < span[1]):
            return None
        out.append((span[0], span[1]))
    return out


class _Union:
    """Disjoint spans with their bytes; pieces that overlap or touch are joined (a file's bytes agree)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.spans: list[tuple[int, bytearray]] = []
        self.total = 0

    def cost(self, start: int, end: int) -> tuple[int, int]:
        """(spans, bytes) the union would have with ``[start, end)`` added."""
        lo, hi = self._touching(start, end)
        if hi - lo == 1 and self.spans[lo][0] <= start and end <= self.spans[lo][0] + len(self.spans[lo][1]):
            return len(self.spans), self.total
        old = sum(len(self.spans[i][1]) for i in range(lo, hi))
        new_start = min([start] + [self.spans[i][0] for i in range(lo, hi)])
        new_end = max([end] + [self.spans[i][0] + len(self.spans[i][1]) for i in range(lo, hi)])
        return len(self.spans) - (hi - lo) + 1, self.total - old + (new_end - new_start)

    def add(self, start: int, data: bytes) -> None:
        end = start + len(data)
        lo, hi = self._touching(start, end)
        new_start = min([start] + [self.spans[i][0] for i in range(lo, hi)])
        new_end = max([end] + [self.spans[i][0] + len(self.spans[i][1]) for i in range(lo, hi)])
        buf = bytearray(new_end - new_start)
        for i in range(lo, hi):
            s, b = self.spans[i]
            buf[s - new_start : s - new_start + len(b)] = b
            self.total -= len(b)
        buf[start - new_start : end - new_start] = data
        self.spans[lo:hi] = [(new_start, buf)]
        self.starts[lo:hi] = [new_start]
        self.total += len(buf)

    def _touching(self, start: int, end: int) -> tuple[int, int]:
        """Indexes ``lo:hi`` of the spans that overlap or touch ``[start, end)``."""
        lo = bisect.bisect_right(self.starts, start) - 1
        if lo < 0 or self.spans[lo][0] + len(self.spans[lo][1]) < start:
            lo += 1
        hi = bisect.bisect_right(self.starts, end)
        return lo, max(lo, hi)


def _spread(n: int) -> list[int]:
    """0..n-1 in an order that covers the range evenly from the start (bit-reversed strides)."""
    order, seen, step = [], set(), 1
    while step < n:
        step *= 2
    while step >= 1:
        for i in range(0, n, step):
            if i not in seen:
                seen.add(i)
                order.append(i)
        step //= 2
    return order


def build(size: int, pieces: dict[int, list[tuple[int, int]]], known: Known) -> dict[str, Any]:
    """The fingerprint of a file of ``size`` bytes from wanted ``pieces`` (kind -> [(start, end)]).

    ``known(start, end)`` gives the bytes at hand from ``start`` (fewer, or none, where the
    scan did not read them); only those go into the fingerprint.
    """
    union, complete = _Union(), True
    for kind in sorted(pieces):
        wanted = sorted({(max(0, a), min(size, b)) for a, b in pieces[kind] if min(size, b) > max(0, a)})
        if len(wanted) > MAX_CANDIDATES:  # many thousands of objects or chunks: an even sample of them
            step = len(wanted) / MAX_CANDIDATES
            wanted, complete = [wanted[int(i * step)] for i in range(MAX_CANDIDATES)], False
        for i in _spread(len(wanted)) if kind != ENDS else range(len(wanted)):
            start, end = wanted[i]
            data = known(start, end)
            if not data:
                continue
            spans, total = union.cost(start, start + len(data))
            if kind != ENDS and (spans > MAX_SPANS or total > MAX_BYTES):
                complete = False
                continue
            union.add(start, bytes(data))
    spans = [(s, s + len(b)) for s, b in union.spans]
    return {"algorithm": ALGORITHM, "spans": [list(s) for s in spans],
            "digest": digest(spans, (bytes(b) for _, b in union.spans)), "complete": complete}


def wanted_pieces(size: int, headers: Iterable[int], indexes: Iterable[int],
                  copied: Iterable[tuple[int, int]]) -> dict[int, list[tuple[int, int]]]:
    """The pieces a fingerprint is chosen from: the ends, object headers, chunk index roots, copied ranges."""
    return {ENDS: [(0, END_BYTES), (size - END_BYTES, size)],
            HEADERS: [(a, a + HEADER_WINDOW) for a in headers],
            INDEXES: [(a, a + INDEX_WINDOW) for a in indexes],
            COPIED: [(a, a + min(n, COPIED_MAX)) for a, n in copied]}


def chunk_index_roots(known: Known, headers: Sequence[int]) -> list[int]:
    """Root nodes of the (version 1 B-tree) chunk indexes the layouts in ``headers`` name, from bytes at hand."""
    from ._prefetch import Walker

    class _AtHand:
        @staticmethod
        def read_range(start: int, end: int) -> bytes:
            return known(start, end)

    walker = Walker.for_file(_AtHand())
    if walker is None:
        return []
    roots: list[int] = []
    for addr in headers[:: max(1, -(-len(headers) // MAX_CANDIDATES))]:
        try:
            roots += [a for a, _ in walker.header(addr)[2]]
        except Exception:  # noqa: BLE001 - a hint only: a header it cannot parse names no root
            continue
    return roots


def of_file(size: int, headers: Sequence[int], copied: Sequence[tuple[int, bytes]], at_hand: Known) -> dict[str, Any]:
    """The fingerprint of a scanned file: ``headers`` are its objects' header addresses, ``copied``
    the ranges copied into the index with their bytes, ``at_hand`` reads what the scan has
    read (a local file: anything; a remote one: its cached blocks)."""
    given = {start: data for start, data in copied}

    def known(start: int, end: int) -> bytes:
        data = given.get(start)
        if data is not None and len(data) >= end - start:
            return data[: end - start]
        return at_hand(start, end)

    headers = sorted(set(headers))
    pieces = wanted_pieces(size, headers, chunk_index_roots(known, headers), [(a, len(d)) for a, d in copied])
    return build(size, pieces, known)
