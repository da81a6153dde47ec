"""Which of the bytes a scan read its index carries as pages (the h5py road's metadata).

The source recorded every range the scan read, tagged by what it served
(:class:`~refindex.source.ReadRecorder`).  Chosen here, by measurement (docs/h5py.md):

- all metadata (object headers, heaps, group B-trees, attributes): what libhdf5 reads to
  open objects, in whole pages of ``page_size`` bytes;
- values the scan copied in (``data`` reads): what pynwb reads while it builds an NWBFile
  (scalars, short strings, reference lists); a dataset's only while they take at most
  :data:`DATA_MAX` bytes (:data:`TEXT_MAX` for variable-length text and its heap collections),
  larger ones stay in the file;
- where pages hold a global heap object equal to an item the index copies in anyway (the
  cached specifications every NWB file carries: most of a small NWB file's pages), that
  object is marked as a hole a JSON index need not repeat (``Pages.holes``);
- a chunk index whose nodes take at most :data:`INDEX_MAX` bytes (a few hundred chunks):
  reading any of its chunks needs it.  Larger ones (10^6 chunks: ~16 MB of B-tree nodes)
  would outgrow the rest of the index: only where their nodes lie is kept
  (``index_ranges``), so a reader fetches a whole index in one round trip when a read
  first needs it.

A file of at most :data:`IN_FILE_MAX` bytes carries none of its bytes (``Pages.in_file``): a reader
fetches the whole file in the round trip of its freshness check, which costs no more time than
that check alone, and the index stays as small as without pages.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..codecs import vlen_chunk_items
from ..model import Pages, Tree
from ..source import INDEX_PREFIX, META, ReadRecorder

# A small dataset's own bytes plus one global heap collection (libhdf5 makes them at least 4 KiB):
# a short text array (MIES' labnotebook keys) reads both, and pynwb reads it while it opens the file.
DATA_MAX = 8 << 10
# Variable-length values (text) lie in global heap collections, several per array: pynwb reads an
# electrodes table's locations while it opens a file (1 KiB of heap references into collections
# of 4 KiB). With DATA_MAX alone the many-object P4 file's open made 7 requests outside the pages; with
# this, none, for 0.8 % more index. (64 KiB for every dataset also grew the corpus's filter test files'
# indexes by 16 %: compressed values pynwb does not read at open.)
TEXT_MAX = 64 << 10
# A chunk index carried whole: up to a few B-tree nodes (a few hundred chunks; P4's 30-chunk
# ElectricalSeries: 10 KiB).  At 64 KiB a file of two 100-chunk datasets (B-tree v2, fixed-size nodes:
# 57 KiB) carried 1.8x its index in pages (pyfive's files 1.54x in all); at 16 KiB 1.21x, the corpus
# 1.070x -> 1.063x, P4's files unchanged.  A larger one costs its first read one round trip (below);
# its node ranges are the same however the walk is split (the superblock is recorded as metadata).
INDEX_MAX = 16 << 10
# Files this small (one block of the read cache) are fetched whole by a reader instead of carried: 64 KiB
# take 1.3 ms at 50 MB/s beside the freshness check's round trip.  Carried, their pages grew their 2-7 KB
# indexes most (the corpus' async-hdf5 files 1.35x, hdmf's 1.31x; all 110 files 1.063x -> 1.048x; docs/h5py.md).
IN_FILE_MAX = 64 << 10
HOLE_MIN = 64  # global heap objects shorter than this stay in the pages (a hole's entry costs about that)
RANGES_MAX = 1 << 20  # spans per left-out index kept at most (a reader then fetches the rest node by node)

# (starts, ends) -> the bytes of each span of the scanned file
ReadSpans = Callable[[list[int], list[int]], list[bytes]]


def paged(starts: np.ndarray, ends: np.ndarray, page_size: int, file_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Ranges widened to whole pages and merged where they touch: sorted, disjoint (starts, ends)."""
    if not len(starts):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = starts // page_size
    last = (np.maximum(ends, starts + 1) - 1) // page_size
    order = np.argsort(first, kind="stable")
    first, last = first[order], last[order]
    reach = np.maximum.accumulate(last)
    new = np.ones(len(first), bool)
    new[1:] = first[1:] > reach[:-1] + 1  # touching or overlapping pages join
    heads = np.nonzero(new)[0]
    tails = np.append(heads[1:] - 1, len(first) - 1)
    lo = first[heads] * page_size
    hi = np.minimum((reach[tails] + 1) * page_size, file_size)
    return lo.astype(np.int64), hi.astype(np.int64)


def merged(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact ranges merged where they overlap or touch."""
    return paged(starts, ends, 1, int(ends.max()) if len(ends) else 0)


def _data_kept(tree: Tree, path: str, nbytes: int) -> bool:
    """Are the values a scan copied in from dataset ``path`` (``nbytes`` read) worth carrying?  A scalar's
    or a one-element dataset's always (pynwb reads each while it builds a file: text, cached
    specifications, which some writers such as MIES store as one-element arrays), variable-length
    ones (text) up to TEXT_MAX bytes, others up to DATA_MAX."""
    node = tree.arrays.get(path)
    one = node is not None and all(int(n) == 1 for n in node.shape)
    text = node is not None and node.dtype == "|O"  # variable-length: values in global heap collections
    return one or nbytes <= (TEXT_MAX if text else DATA_MAX)


def extents(tree: Tree) -> dict[str, tuple[int, int]]:
    """For each array with chunks referenced in the scanned file: (first byte, end of last chunk)."""
    out = {}
    for path, a in tree.arrays.items():
        t = a.refs
        if t is not None and len(t) and t.url_index is None and t.url in (None, tree.url):
            out[path] = (int(t.offsets.min()), int((t.offsets + t.sizes).max()))
    return out


def choose_pages(recorder: ReadRecorder, file_size: int, read: ReadSpans, tree: Tree) -> Pages:
    """The pages of ``tree``'s index from what ``recorder`` saw, their bytes read with ``read``."""
    page = recorder.page_size
    external = sum(1 for link in tree.links if link.kind == "external")
    if file_size <= IN_FILE_MAX:
        return Pages.kept_in_file(page, file_size, external, sorted(tree.reads_elsewhere))
    keep_s: list[np.ndarray] = []
    keep_e: list[np.ndarray] = []
    left_out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for tag, (s, e) in recorder.by_tag().items():
        if tag.startswith(INDEX_PREFIX):
            ms, me = merged(s, e)
            if int((me - ms).sum()) > INDEX_MAX:
                if len(ms) <= RANGES_MAX:
                    left_out[tag[len(INDEX_PREFIX):]] = (ms, me)
                continue
        elif tag != META and tag != "data:" and not _data_kept(tree, tag[len("data:"):], int((e - s).sum())):
            continue  # values a reader reads when it asks for them, not while it opens the file
        keep_s.append(s)
        keep_e.append(e)
    starts, ends = paged(np.concatenate(keep_s) if keep_s else np.zeros(0, np.int64),
                         np.concatenate(keep_e) if keep_e else np.zeros(0, np.int64), page, file_size)
    datas = read(starts.tolist(), ends.tolist()) if len(starts) else []
    for a, b, d in zip(starts.tolist(), ends.tolist(), datas):
        if len(d) != b - a:
            raise ValueError(f"pages: read {len(d)} of {b - a} bytes at {a}")
    data = b"".join(datas)
    return Pages(page, file_size, starts, ends, data, left_out, extents(tree), external,
                 sorted(tree.reads_elsewhere), holes(starts, ends, data, tree))


def inline_items(tree: Tree) -> dict[bytes, tuple[str, str, int]]:
    """Every item of the inline variable-length chunks (of at least HOLE_MIN bytes): bytes -> (array, chunk key, item)."""
    out: dict[bytes, tuple[str, str, int]] = {}
    for path, node in tree.arrays.items():
        for key, raw in node.inline.items():
            for i, item in enumerate(vlen_chunk_items(raw, node.filters, node.compressor) or ()):
                if len(item) >= HOLE_MIN:
                    out.setdefault(item, (path, key, i))
    return out


def holes(starts: np.ndarray, ends: np.ndarray, data: bytes, tree: Tree) -> list[tuple[int, int, str, str, int]]:
    """The ranges of the pages equal to an inline chunk, or to an item of one (see Pages.holes)."""
    out = [(a, a + n, path, key, -1) for a, n, path, key in tree.copied if n >= HOLE_MIN and _inside(starts, ends, a, a + n)]
    out += compact_holes(starts, ends, data, tree)
    out += heap_holes(starts, ends, data, tree)
    out.sort()
    return [h for i, h in enumerate(out) if i == 0 or h[0] >= out[i - 1][1]]  # disjoint


def compact_holes(starts: np.ndarray, ends: np.ndarray, data: bytes, tree: Tree) -> list[tuple[int, int, str, str, int]]:
    """Compact datasets' data, found in the span of the pages that holds their object header."""
    out = []
    at = np.concatenate([[0], np.cumsum(ends - starts)[:-1]]).astype(np.int64) if len(starts) else starts
    for header, n, path, key in tree.copied:
        node = tree.arrays.get(path)
        raw = node.inline.get(key) if node is not None and n < 0 else None
        i = int(np.searchsorted(starts, header, side="right")) - 1
        if raw is None or len(raw) < HOLE_MIN or i < 0 or header >= int(ends[i]):
            continue
        lo = int(at[i])
        found = data.find(raw, lo + header - int(starts[i]), lo + int(ends[i] - starts[i]))
        if found >= 0:
            start = int(starts[i]) + found - lo
            out.append((start, start + len(raw), path, key, -1))
    return out


def _inside(starts: np.ndarray, ends: np.ndarray, a: int, b: int) -> bool:
    i = int(np.searchsorted(starts, a, side="right")) - 1
    return i >= 0 and b <= int(ends[i])


def heap_holes(starts: np.ndarray, ends: np.ndarray, data: bytes, tree: Tree) -> list[tuple[int, int, str, str, int]]:
    """The global heap objects in the pages whose bytes equal an inline variable-length item."""
    if b"GCOL" not in data:
        return []
    items = inline_items(tree)
    if not items:
        return []
    out = []
    at = 0
    for a, b in zip(starts.tolist(), ends.tolist()):
        span = data[at: at + b - a]
        at += b - a
        i = span.find(b"GCOL")
        while i >= 0:
            for off, size in heap_objects(span, i):
                source = items.get(span[off: off + size])
                if source is not None:
                    out.append((a + off, a + off + size, *source))
            i = span.find(b"GCOL", i + 4)
    return out


def heap_objects(span: bytes, at: int) -> list[tuple[int, int]]:
    """(offset, size) of the objects of a global heap collection at ``at`` in ``span`` (HDF5 format
    spec III.E, 8-byte lengths), or [] when what is there does not parse as one whole collection."""
    if span[at + 4: at + 5] != b"\x01" or at + 16 > len(span):
        return []
    end = at + int.from_bytes(span[at + 8: at + 16], "little")
    if end > len(span):
        return []
    out = []
    pos = at + 16
    while pos + 16 <= end:
        index = int.from_bytes(span[pos: pos + 2], "little")
        size = int.from_bytes(span[pos + 8: pos + 16], "little")
        if index == 0:  # free space: the rest of the collection
            return out
        if pos + 16 + size > end:
            return []
        out.append((pos + 16, size))
        pos += 16 + -(-size // 8) * 8
    return out
