"""libhdf5's own listing of a dataset's chunks: ``chunk_iter`` into numpy columns.

The native index readers (:mod:`refindex.scanner.chunkindex`) list most datasets; this is
what lists the rest (and what they are checked against).
"""

from __future__ import annotations

import array
import gc
from operator import itemgetter
from typing import Any

import h5py
import numpy as np

from ..model import ChunkTable
from ..feedback.progress import NoProgress, Progress

_U32 = next(t for t in "IL" if array.array(t).itemsize == 4)  # array typecode of a uint32 (filter masks)
GRID_PREALLOCATE = 1 << 24  # rows of a chunk-coordinate table allocated up front (the rest grow)


def chunk_table(d: h5py.Dataset, ndim: int, chunks: Any, extra: Any = (), *, preallocate: int = GRID_PREALLOCATE,
                progress: Progress | None = None) -> tuple[ChunkTable, np.ndarray]:
    """One pass of ``chunk_iter`` into numpy columns (no per-chunk Python objects kept); (table, filter masks).

    The callback only extends a short list with each ``StoreInfo``; every 1,024 chunks
    the list goes into numpy/``array.array`` columns (grid coordinates, filter masks,
    byte offsets, sizes) that numpy views without a copy at the end.  Coordinates go
    straight into an array sized for the chunk grid, up to ``preallocate`` rows
    (pages the OS maps only when written); chunks beyond that (huge grids, or an index
    listing more chunks than the grid holds) grow in an ``array.array``.  Memory stays
    near 8 bytes per integer kept (about 40 bytes a chunk for 2-D data) and the
    per-chunk Python work is one list extend.
    """
    progress = progress or NoProgress()
    pending: list = []
    extend = pending.extend
    grid = int(np.prod([-(-int(s) // int(c)) for s, c in zip(d.shape[:ndim], chunks[:ndim])], dtype=np.float64))
    table = np.empty((max(0, min(grid, preallocate)), ndim), np.int64)
    filled = 0
    overflow = array.array("q")  # row-major element offsets beyond ``table``
    columns = [array.array(_U32), array.array("Q"), array.array("Q")]  # filter mask, byte offset, size
    limit = 4 * 1024  # small batches: the tuples freed at each flush are reused at once

    def flush() -> None:
        nonlocal filled
        if not pending:
            return
        starts = pending[0::4]
        m = len(starts)
        room = 0 if overflow else min(m, len(table) - filled)
        block = table[filled:filled + m] if room == m else np.empty((m, ndim), np.int64)
        for i in range(ndim):  # a dimension at a time: faster than flattening the tuples
            block[:, i] = np.fromiter(map(itemgetter(i), starts), np.int64, count=m)
        if room < m:  # the table is full: the rest grows in ``overflow``
            table[filled:filled + room] = block[:room]
            overflow.frombytes(memoryview(block[room:]).cast("B"))
        filled += room
        for i, col in enumerate(columns):
            col.fromlist(pending[1 + i::4])
        pending.clear()
        progress.chunks(m)

    def cb(info: Any) -> None:
        extend(info)  # chunk_offset, filter_mask, byte_offset, size
        if len(pending) >= limit:
            flush()

    # The collector would scan the pending StoreInfo tuples again and again: nothing
    # here forms reference cycles, so it is paused for the pass.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        d.id.chunk_iter(cb)
    finally:
        if was_enabled:
            gc.enable()
    flush()
    n = len(columns[0])
    coords = table[:filled] if 2 * filled >= len(table) else table[:filled].copy()  # sparse: the rest freed on return
    if overflow:
        coords = np.concatenate([coords, np.frombuffer(overflow, np.int64).reshape(-1, ndim)])
    coords //= np.asarray(chunks[:ndim], np.int64)  # element offsets -> grid indices, in place
    if extra:  # trailing dimensions of string-as-array types: always chunk 0
        coords = np.concatenate([coords, np.zeros((n, len(extra)), np.int64)], axis=1)
    masks, offsets, sizes = (np.frombuffer(c, np.dtype(c.typecode)) if n else np.zeros(0, np.dtype(c.typecode))
                             for c in columns)
    return ChunkTable(coords, offsets, sizes, None), masks
