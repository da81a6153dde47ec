"""Dimension names for ``_ARRAY_DIMENSIONS``: dimension scales, netCDF-4's ids, else phony names."""

from __future__ import annotations

import posixpath
from functools import partial
from typing import Any

import h5py
import numpy as np

from ..model import NcMember
from ._attrs import attribute
from ._context import ScanContext
from ._objects import dereferenced, member, wrapped


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def dimension_names(ctx: ScanContext) -> dict[int, str]:
    """netCDF-4 dimension ids -> names (for ``_Netcdf4Coordinates``), found on first use."""
    if ctx.dimids is None:
        ctx.dimids = {}
        for path in ctx.canonical.values():
            obj = member(ctx.f, path)
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
    dsid = d.id
    try:
        if ndim and h5py.h5ds.is_scale(dsid):
            names[0] = basename(path)
        elif ndim and h5py.h5a.exists(dsid, b"DIMENSION_LIST"):
            names = first_scales(ctx, dsid, ndim)
    except Exception:
        pass
    if ndim and h5py.h5a.exists(dsid, b"_Netcdf4Coordinates"):
        try:
            ids = np.asarray(attribute(dsid, "_Netcdf4Coordinates")).reshape(-1)
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


def first_scales(ctx: ScanContext, dsid: Any, ndim: int) -> list[str | None]:
    """The name of the first scale attached to each axis (h5py's ``d.dims[i][0]``), from one read of
    ``DIMENSION_LIST`` (h5py's dimension proxies read it again for each axis and open each scale twice)."""
    lists = attribute(dsid, "DIMENSION_LIST")
    names: list[str | None] = [None] * ndim
    for i in range(min(ndim, len(lists))):
        try:
            if len(lists[i]):
                names[i] = basename(ctx.canonical_path(dereferenced(dsid, lists[i][0])))
        except Exception:
            pass
    return names


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


# ---------------------------------------------------------------- netCDF's view (h5netcdf's reads)

NOT_A_VARIABLE = b"This is a netCDF dimension but not a netCDF variable"


def nc_members(ctx: ScanContext, g: h5py.Group, opened: dict[str, h5py.Dataset]) -> list[NcMember] | None:
    """The dataset members of group ``g`` in the order h5py lists them, with what h5netcdf reads of
    each to name dimensions (None where libhdf5 cannot say: the plain convention keeps the scan's names).
    ``opened``: members the walk has open already."""
    out = []
    try:
        for name in g.keys():  # h5py's order (names, or creation order where the group tracks it)
            if not isinstance(name, str) or (name not in opened and not _is_dataset(g, name)):
                continue
            out.append(nc_member(ctx, name, opened[name] if name in opened else member(g, name)))
    except Exception:  # noqa: BLE001 - a member h5netcdf could not open either
        return None
    return out


def _is_dataset(g: h5py.Group, name: str) -> bool:
    try:
        info = g.id.links.get_info(name.encode("utf-8"))
        if info.type not in (h5py.h5l.TYPE_HARD, h5py.h5l.TYPE_SOFT):
            return False  # external and user-defined links: not part of the index's plain view
        return h5py.h5g.get_objinfo(g.id, name.encode("utf-8")).type == h5py.h5g.DATASET
    except Exception:  # noqa: BLE001 - dangling
        return False


def nc_member(ctx: ScanContext, name: str, d: h5py.Dataset) -> NcMember:
    """h5netcdf's reads of one dataset: its CLASS and NAME, netCDF-4's ids, the scales on each axis."""
    present = set(d.attrs.keys())
    value = partial(attribute, d.id)
    m = NcMember(name, None if d.shape is None else tuple(int(s) for s in d.shape))
    if "CLASS" in present:
        m.scale = bool(np.all(value("CLASS") == b"DIMENSION_SCALE"))
    if "NAME" in present:
        text = value("NAME")
        m.dimension_only = NOT_A_VARIABLE in (text.encode() if isinstance(text, str) else bytes(text))
    if "_Netcdf4Dimid" in present:
        m.dimid = int(np.asarray(value("_Netcdf4Dimid")).reshape(-1)[0])
    if "_Netcdf4Coordinates" in present:
        m.coordinates = [int(i) for i in np.asarray(value("_Netcdf4Coordinates")).reshape(-1)]
    if "DIMENSION_LIST" in present:
        m.scales = [[basename(libhdf5_name(ctx, dereferenced(ctx.f, ref))) for ref in axis]
                    for axis in value("DIMENSION_LIST")]
    if m.scale and m.shape:
        m.size = m.shape[0]
        m.unlimited = d.maxshape == (None,)
        if m.unlimited and "REFERENCE_LIST" in present:  # h5netcdf: the longest axis of the datasets using it
            for ref, axis in value("REFERENCE_LIST"):
                m.size = max(m.size, int(dereferenced(ctx.f, ref).shape[int(axis)]))
    return m


def libhdf5_name(ctx: ScanContext, oid: Any) -> str:
    """The path libhdf5 gives an object opened by reference (h5py's ``.name``, what h5netcdf names
    scales by): its one path when it has one hard link; else libhdf5's search of the file (a
    walk of the whole hierarchy: done once per object)."""
    st = h5py.h5g.get_objinfo(oid)
    key = (st.fileno, st.objno)
    if st.nlink == 1 and key in ctx.canonical:
        return ctx.canonical[key]
    if key not in ctx.ref_names:
        ctx.ref_names[key] = wrapped(oid).name or ""
    return ctx.ref_names[key]
