"""``xr.open_dataset(index_or_hdf5_url, engine="refindex")``: xarray over refindex's store.

What xarray shows is what its zarr backend shows over the index (the values and decoding
h5netcdf shows on the file, tests/test_xarray.py), read through :class:`IndexStore`: a
selection's chunks fetched together in few requests.  What this backend adds: it opens what
:func:`refindex.open` opens (an index as dict, JSON, parquet or Icechunk repository, or an
HDF5 file/URL indexed on the fly), and with dask (``chunks={}`` or ``"auto"``) it proposes
dask chunks that group many zarr chunks (``preferred_chunks``), so a task reads many chunks
in one round trip instead of one task per (often tiny) chunk.

xarray imports this module when it lists its engines: it imports nothing heavy itself.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import Any

from xarray.backends import BackendEntrypoint

TASK_BYTES = 64 << 20  # what one dask task reads at most (uncompressed), by grouping zarr chunks
INDEX_SUFFIXES = (".refs.json", ".refs.parq", ".refs.parquet")


class RefindexBackendEntrypoint(BackendEntrypoint):
    """xarray's ``engine="refindex"`` (see the module docstring)."""

    description = "Open HDF5/netCDF4 through a refindex reference index (or index it on the fly)"
    url = "docs/xarray.md"  # (the project has no public site yet)
    open_dataset_parameters = (
        "filename_or_obj", "drop_variables", "mask_and_scale", "decode_times", "concat_characters",
        "decode_coords", "use_cftime", "decode_timedelta", "group", "storage_options", "remote_options",
        "check_source", "cache", "allowed_urls", "trust", "task_bytes",
    )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if isinstance(filename_or_obj, dict):
            return "refs" in filename_or_obj and "version" in filename_or_obj
        if isinstance(filename_or_obj, (str, os.PathLike)):
            return os.fspath(filename_or_obj).rstrip("/").endswith(INDEX_SUFFIXES)
        return False

    def open_dataset(self, filename_or_obj: Any, *, drop_variables: str | Iterable[str] | None = None,
                     mask_and_scale: bool = True, decode_times: Any = True, concat_characters: bool = True,
                     decode_coords: Any = True, use_cftime: bool | None = None, decode_timedelta: Any = None,
                     group: str | None = None, storage_options: dict[str, Any] | None = None,
                     remote_options: dict[str, Any] | None = None, check_source: bool = True,
                     cache: Any = True, allowed_urls: Any = None, trust: bool = False,
                     task_bytes: int = TASK_BYTES) -> Any:
        from xarray.backends.zarr import ZarrBackendEntrypoint

        from .zarr_store._open import open as open_index

        root = open_index(filename_or_obj, storage_options=storage_options, remote_options=remote_options,
                          check_source=check_source, cache=cache, allowed_urls=allowed_urls, trust=trust)
        zarr_format = root.metadata.zarr_format
        ds = ZarrBackendEntrypoint().open_dataset(
            root.store, group=None if group in (None, "", "/") else group.strip("/"), mode="r",
            consolidated=_consolidated(root, zarr_format), zarr_format=zarr_format,
            drop_variables=drop_variables, mask_and_scale=mask_and_scale, decode_times=decode_times,
            concat_characters=concat_characters, decode_coords=decode_coords, use_cftime=use_cftime,
            decode_timedelta=decode_timedelta)
        for var in ds.variables.values():
            chunks = var.encoding.get("preferred_chunks")
            if chunks:
                var.encoding["preferred_chunks"] = grouped_chunks(var.shape, var.dims, chunks,
                                                                  var.dtype.itemsize, task_bytes)
        return ds


def _consolidated(root: Any, zarr_format: int) -> bool | None:
    """Whether xarray may open through consolidated metadata (it is in memory: one lookup)."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from ..formats import for_zarr

    key = for_zarr(zarr_format).consolidated_key
    if key is None:
        return None  # the index states it in its root document; zarr finds it
    return sync(root.store.get(key, prototype=default_buffer_prototype())) is not None


def grouped_chunks(shape: tuple[int, ...], dims: tuple[str, ...], chunks: dict[str, int], itemsize: int,
                   task_bytes: int = TASK_BYTES) -> dict[str, int]:
    """Dask chunks that are whole multiples of the zarr ``chunks`` (by dimension) and read at most
    ``task_bytes``: the last dimension grown first, to its full length, then the one before, so a task's
    zarr chunks lie side by side in the grid (and, chunks written in order, on disk)."""
    out = {d: int(chunks.get(d, n) or n) for d, n in zip(dims, shape)}
    size = itemsize * math.prod(out.values())
    for d, n in reversed(list(zip(dims, shape))):
        c = out[d]
        if c <= 0 or c >= n:
            continue
        k = max(1, min(-(-n // c), task_bytes // max(1, size)))
        out[d] = min(n, c * k)
        size = size // c * out[d]
        if out[d] < n:
            break
    return out
