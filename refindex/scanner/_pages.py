"""Which of the bytes a scan read its index carries as pages (the h5py road's metadata).

The source recorded every range the scan read, tagged by what it served
(:class:`~refindex.source.ReadRecorder`).  Chosen here, by measurement (docs/h5py.md):

- all metadata (object headers, heaps, group B-trees, attributes): what libhdf5 reads to
  open objects, in whole pages of ``page_size`` bytes;
- values the scan copied in (``data`` reads): what pynwb reads while it builds an NWBFile
  (scalars, short strings, reference lists); a dataset's only while they take at most
  :data:`DATA_MAX` bytes, larger ones stay in the file;
- a chunk index whose nodes take at most :data:`INDEX_MAX` bytes (a few hundred chunks):
  reading any of its chunks needs it.  Larger ones (10^6 chunks: ~16 MB of B-tree nodes)
  would outgrow the rest of the index: only where their nodes lie is kept
  (``index_ranges``), so a reader fetches a whole index in one round trip when a read
  first needs it.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..model import Pages, Tree
from ..source import INDEX_PREFIX, META, ReadRecorder

DATA_MAX = 64 << 10
INDEX_MAX = 64 << 10
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
        elif tag != META and tag != "data:" and int((e - s).sum()) > DATA_MAX:
            continue  # a large value copied in: the file serves it when a reader asks
        keep_s.append(s)
        keep_e.append(e)
    starts, ends = paged(np.concatenate(keep_s) if keep_s else np.zeros(0, np.int64),
                         np.concatenate(keep_e) if keep_e else np.zeros(0, np.int64), page, file_size)
    datas = read(starts.tolist(), ends.tolist()) if len(starts) else []
    for a, b, d in zip(starts.tolist(), ends.tolist(), datas):
        if len(d) != b - a:
            raise ValueError(f"pages: read {len(d)} of {b - a} bytes at {a}")
    external = sum(1 for link in tree.links if link.kind == "external")
    return Pages(page, file_size, starts, ends, b"".join(datas), left_out, extents(tree), external,
                 sorted(tree.reads_elsewhere))
