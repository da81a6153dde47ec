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


def write_fill_values(path: str | os.PathLike) -> None:
    """Datasets whose chunks were never (all) written, with fill values other than zero, with and
    without netCDF's ``_FillValue``/``missing_value`` attributes: what a reader of never-written
    chunks must read as HDF5's fill value while xarray masks only what the attributes say."""
    grid = np.arange(16, dtype="i4").reshape(4, 4)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("sparse_i4", shape=(4, 4), chunks=(2, 2), dtype="i4", fillvalue=-7)
        d[:2, :2] = grid[:2, :2]  # three chunks never written; no _FillValue: nothing masked
        d = f.create_dataset("sparse_gzip", shape=(5, 4), chunks=(2, 2), dtype="<f4", fillvalue=2.5,
                             compression="gzip", shuffle=True)
        d[2:4, 0:2] = [[0, 1], [2.5, 3]]  # an element equal to the fill value, and zeros
        d = f.create_dataset("netcdf_style", shape=(4, 4), chunks=(2, 2), dtype="<f8", fillvalue=-999.0)
        d.attrs["_FillValue"] = np.array([-999.0])  # netCDF: the attribute says what HDF5's fill is
        d[0, :] = [1, -999, 0, 3]
        d = f.create_dataset("attribute_differs", shape=(4,), chunks=(2,), dtype="<i2", fillvalue=0)
        d.attrs["_FillValue"] = np.int16(5)  # masks 5; never-written chunks still read HDF5's 0
        d[:2] = [5, 6]
        d = f.create_dataset("missing_value", shape=(6,), chunks=(2,), dtype="<i8", fillvalue=-1)
        d.attrs["missing_value"] = np.array([4], "i8")
        d[:2] = [4, 0]
        f.create_dataset("never_written", shape=(3, 4), dtype="<u2", fillvalue=65535)  # no storage at all
        f.create_dataset("never_written_scalar", shape=(), dtype="<f8", fillvalue=7.5)
        d = f.create_dataset("text", shape=(6,), chunks=(2,), dtype="S3", fillvalue=b"zz")
        d[:2] = [b"a", b""]
        d = f.create_dataset("nan_fill", shape=(4,), chunks=(2,), dtype="<f4", fillvalue=np.nan)
        d[:2] = [0, 1]
        d = f.create_dataset("unlimited", shape=(5,), maxshape=(None,), chunks=(4,), dtype="<i4", fillvalue=-3)
        d[:5] = np.arange(5)
        f.create_dataset("many_unwritten", shape=(200,), chunks=(1,), dtype="<i1", fillvalue=-1)[7] = 1
