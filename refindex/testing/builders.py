"""Test-file builders that tests and benchmarks share (not part of the core path)."""

from __future__ import annotations

import os

import h5py
import numpy as np


def one_byte_chunks_values(rows: int, cols: int) -> np.ndarray:
    """The values :func:`write_one_byte_chunks` stores: ``i % 251`` over the flattened array."""
    return (np.arange(rows * cols, dtype=np.int64) % 251).astype(np.uint8).reshape(rows, cols)


def write_one_byte_chunks(path: str | os.PathLike, rows: int, cols: int, name: str = "data") -> None:
    """A ``rows x cols`` uint8 dataset in 1x1 chunks: 10^7 chunks in seconds, to try huge indexes.

    Writing that many chunks through h5py takes minutes, so they are allocated when the
    dataset is created (libver "latest": a fixed-array chunk index, one run of bytes in
    chunk order) and filled with a single write; a sample of chunks is then checked
    through libhdf5's own index.
    """
    with h5py.File(path, "w", libver="latest") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((1, 1))
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        space = h5py.h5s.create_simple((rows, cols))
        did = h5py.h5d.create(f.id, name.encode(), h5py.h5t.NATIVE_UINT8, space, dcpl=dcpl)
        first = did.get_chunk_info(0).byte_offset
    values = one_byte_chunks_values(rows, cols)
    with open(path, "r+b") as fh:
        fh.seek(int(first))
        fh.write(values.tobytes())
    with h5py.File(path, "r") as f:
        d = f[name]
        rng = np.random.default_rng(3)
        for r, c in zip(rng.integers(0, rows, 200).tolist(), rng.integers(0, cols, 200).tolist()):
            if d.id.get_chunk_info_by_coord((r, c)).byte_offset != first + r * cols + c or d[r, c] != values[r, c]:
                raise RuntimeError(f"{path}: chunks were not allocated as one run in chunk order")
