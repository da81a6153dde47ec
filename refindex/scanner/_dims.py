"""Dimension names for ``_ARRAY_DIMENSIONS``: dimension scales, netCDF-4's ids, else phony names."""

from __future__ import annotations

import posixpath

import h5py
import numpy as np

from ._context import ScanContext


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def dimension_names(ctx: ScanContext) -> dict[int, str]:
    """netCDF-4 dimension ids -> names (for ``_Netcdf4Coordinates``), found on first use."""
    if ctx.dimids is None:
        ctx.dimids = {}
        for path in ctx.canonical.values():
            obj = ctx.f[path]
            if isinstance(obj, h5py.Dataset) and "_Netcdf4Dimid" in obj.attrs:
                try:
                    ctx.dimids[int(np.asarray(obj.attrs["_Netcdf4Dimid"]).reshape(-1)[0])] = basename(path)
                except Exception:
                    pass
    return ctx.dimids


def dims_of(ctx: ScanContext, d: h5py.Dataset, path: str, extra: int) -> list[str]:
    """A name for each axis of ``d`` (plus ``extra`` trailing axes of an array datatype)."""
    ndim = len(d.shape)
    names: list[str | None] = [None] * ndim
    try:
        if ndim and h5py.h5ds.is_scale(d.id):
            names[0] = basename(path)
        elif ndim and "DIMENSION_LIST" in d.attrs:
            for i in range(ndim):
                try:
                    dim = d.dims[i]
                    if len(dim):
                        names[i] = basename(ctx.canonical_path(dim[0]))
                except Exception:
                    pass
    except Exception:
        pass
    if "_Netcdf4Coordinates" in d.attrs and ndim:
        try:
            ids = np.asarray(d.attrs["_Netcdf4Coordinates"]).reshape(-1)
            dimids = dimension_names(ctx)
            for i, dimid in enumerate(ids[:ndim]):
                if names[i] is None and int(dimid) in dimids:
                    names[i] = dimids[int(dimid)]
        except Exception:
            pass
    used: list[str] = [n for n in names if n]
    out = []
    shape = list(d.shape) + [0] * extra
    for i in range(ndim + extra):
        if i < ndim and names[i]:
            out.append(names[i])
        else:
            out.append(phony_dim(ctx, path, shape[i] if i < ndim else -1 - i, used))
        used.append(out[-1])
    return out


def phony_dim(ctx: ScanContext, path: str, size: int, used: list[str]) -> str:
    """``phony_dim_N`` of the dataset's group: reused for another axis of the same size, as netCDF does."""
    group = posixpath.dirname(path) or "/"
    dims = ctx.phony.setdefault(group, [])
    for name, s in dims:
        if s == size and name not in used:
            return name
    name = f"phony_dim_{len(dims)}"
    dims.append((name, size))
    return name
