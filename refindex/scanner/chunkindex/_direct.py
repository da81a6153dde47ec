"""Indexes without index structures (layout version 4): a single chunk, and implicit indexes.

Single chunk: the Data Layout message holds the chunk's address (and, filtered, its stored size
and filter mask).  Implicit (no filters, space allocated early): every chunk of the maximum
shape lies at ``address + chunk number x chunk size``, numbered in C order over the maximum
chunk grid; libhdf5 lists the chunks of the current extent.
"""

from __future__ import annotations

import numpy as np

from ._base import DatasetFacts, Listing, Reader, unravel
from ._layout import Layout


def read_single(reader: Reader, ds: DatasetFacts, layout: Layout, progress=None) -> Listing:
    rank = len(ds.chunks)
    size, mask = (layout.params["size"], layout.params["mask"]) if layout.flags & 0x02 else (ds.chunk_bytes, 0)
    return Listing(np.zeros((1, rank), np.int64), np.asarray([layout.address + reader.facts.base], np.uint64),
                   np.asarray([size], np.uint64), np.asarray([mask], np.uint32))


def read_implicit(reader: Reader, ds: DatasetFacts, layout: Layout, progress=None) -> Listing:
    rank = len(ds.chunks)
    if any(m is None for m in ds.maxshape):
        raise reader.fail("an implicit index of an unlimited dataset")
    current, most = ds.grid(ds.shape), ds.grid(ds.maxshape)
    if (current > most).any():
        raise reader.fail("a dataset larger than its maximum shape")
    n = int(np.prod(current, dtype=np.int64))
    coords = unravel(np.arange(n, dtype=np.uint64), current)
    down = np.asarray([int(np.prod(most[i + 1:], dtype=np.int64)) for i in range(rank)], np.int64)
    number = (coords * down).sum(axis=1).astype(np.uint64)
    size = ds.chunk_bytes
    end = np.uint64(layout.address) + np.uint64(int(np.prod(most, dtype=np.int64)) * size)
    if int(end) + reader.facts.base > reader.facts.eof:
        raise reader.fail("implicit chunks beyond the end of the file")
    offsets = np.uint64(layout.address + reader.facts.base) + number * np.uint64(size)
    return Listing(coords, offsets, np.full(n, size, np.uint64), np.zeros(n, np.uint32))
