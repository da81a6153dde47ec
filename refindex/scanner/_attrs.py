"""Attributes and references: what HDF5 metadata becomes in the index's JSON.

References follow hdmf-zarr's storage spec (``{"source", "path", "object_id",
"source_object_id"}``) plus ``region`` for region references.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import h5py
import numpy as np

from ..codecs import jsonable, lost_type
from ..checks.compare import object_key
from ..errors import RefindexError, UnsupportedError
from ._context import ScanContext
from ._objects import dereferenced, wrapped

# HDF5 attributes that are bookkeeping of dimension scales or netCDF, not user metadata.
HIDDEN_ATTRS = {"DIMENSION_LIST", "REFERENCE_LIST", "_Netcdf4Dimid", "_Netcdf4Coordinates"}
SCALE_ATTRS = {"CLASS", "NAME"}


def unsafe_type(tid: Any) -> str | None:
    """Why h5py cannot read values of this HDF5 type safely, or None.

    h5py corrupts memory when it converts variable-length sequences of region
    references (seen with h5py 3.16 / HDF5 2.0: a second read crashes the process), so
    such types are refused before any value is read.
    """

    def walk(t: Any, inside_vlen: bool) -> str | None:
        if isinstance(t, h5py.h5t.TypeReferenceID):
            if inside_vlen and not t.equal(h5py.h5t.STD_REF_OBJ):
                return "region references inside variable-length data (h5py cannot read them safely)"
            return None
        if isinstance(t, h5py.h5t.TypeVlenID) and not isinstance(t, h5py.h5t.TypeStringID):
            return walk(t.get_super(), True)
        if isinstance(t, h5py.h5t.TypeArrayID):
            return walk(t.get_super(), inside_vlen)
        if isinstance(t, h5py.h5t.TypeCompoundID):
            for i in range(t.get_nmembers()):
                why = walk(t.get_member_type(i), inside_vlen)
                if why:
                    return why
        return None

    return walk(tid, False)


def object_id_of(obj: Any) -> str | None:
    """The HDMF ``object_id`` attribute of an object, if it has one."""
    try:
        v = obj.attrs.get("object_id")
    except Exception:
        return None
    return jsonable(v) if v is not None else None


def ref_obj(ctx: ScanContext, ref: Any) -> Any:
    """A reference as a JSON object following hdmf-zarr's storage spec (plus ``region``).

    The target's path and ``object_id`` are found once per object (an NWB table's column of
    references points at a few groups again and again: 0.5 ms a reference otherwise)."""
    if not ref:
        return None
    try:
        oid = dereferenced(ctx.f, ref)
        key = object_key(oid)
        known = ctx.ref_targets.get(key)
        if known is None:
            target = wrapped(oid)
    except Exception as e:
        return {"source": ".", "path": None, "error": f"unresolvable reference: {e}"}
    if known is None:
        known = ctx.ref_targets[key] = (ctx.canonical.get(key) or target.name, object_id_of(target))
    out: dict[str, Any] = {
        "source": ".",
        "path": known[0],
        "object_id": known[1],
        "source_object_id": ctx.tree.root_object_id,
    }
    if isinstance(ref, h5py.RegionReference):
        out["region"] = region_of(ref, oid)
    return out


def ref_json(ctx: ScanContext, ref: Any) -> str:
    return json.dumps(ref_obj(ctx, ref), allow_nan=True)


def region_of(ref: Any, target: Any) -> Any:
    """The selection of a region reference (``target``: the low-level id of the dataset it points into):
    slices, blocks, points, all or none."""
    space = h5py.h5r.get_region(ref, target)
    sel = space.get_select_type()
    if sel == h5py.h5s.SEL_ALL:
        return {"all": True}
    if sel == h5py.h5s.SEL_NONE:
        return {"none": True}
    if sel == h5py.h5s.SEL_POINTS:
        return {"points": np.asarray(space.get_select_elem_pointlist()).tolist()}
    blocks = np.asarray(space.get_select_hyper_blocklist())  # (n, 2, ndim) inclusive corners
    slabs = [[[int(a), int(b) + 1] for a, b in zip(blk[0], blk[1])] for blk in blocks]
    if len(slabs) == 1:
        return {"slices": slabs[0]}
    return {"blocks": slabs}


def opaque_attr(aid: Any) -> dict[str, Any]:
    """An opaque attribute as its raw bytes: ``{"zarr_dtype": "opaque", "tag", "shape", "base64"}``."""
    t = aid.get_type()
    shape = tuple(aid.shape or ())
    arr = np.empty(shape, dtype=f"V{t.get_size()}")
    aid.read(arr, mtype=t)
    tag = t.get_tag()
    return {
        "zarr_dtype": "opaque",
        "tag": tag.decode("utf-8", "replace") if isinstance(tag, bytes) else str(tag),
        "shape": list(shape),
        "itemsize": t.get_size(),
        "base64": base64.standard_b64encode(arr.tobytes()).decode("ascii"),
    }


def attribute_value(aid: Any) -> Any:
    """The value of an open attribute, exactly as h5py's ``obj.attrs[name]`` returns it.

    The same steps as h5py's AttributeManager, on the attribute the caller already opened
    to check its type: ``obj.attrs[name]`` would open it a second time, and on files of
    many small objects (NWB) attribute opens are a third of a scan.
    """
    shape = aid.shape
    if shape is None:  # empty dataspace
        return h5py.Empty(aid.dtype)
    dtype = aid.dtype
    htype = h5py.h5t.py_create(dtype)
    if dtype.subdtype is not None:  # a top-level array type: numpy wants it as extra axes
        dtype, sub = dtype.subdtype
        shape = shape + sub
    arr = np.zeros(shape, dtype=dtype, order="C")
    aid.read(arr, mtype=htype)
    info = h5py.check_string_dtype(dtype)
    if info and info.length is None:  # variable-length strings come back as str
        arr = np.array([b.decode("utf-8", "surrogateescape") for b in arr.flat], dtype=dtype).reshape(arr.shape)
    return arr[()] if arr.ndim == 0 else arr


def attribute(oid: Any, name: str) -> Any:
    """``obj.attrs[name]`` of the object whose low-level id is ``oid``, without h5py's attribute manager."""
    return attribute_value(h5py.h5a.open(oid, name.encode("utf-8")))


def attributes_of(ctx: ScanContext, obj: Any, path: str, types: dict[str, str] | None = None) -> dict[str, Any]:
    """The attributes of ``obj`` as JSON values (dimension-scale and netCDF bookkeeping left out);
    ``types`` gets the numpy type of each one whose JSON form loses it (:func:`~refindex.codecs.lost_type`)."""
    out: dict[str, Any] = {}
    try:
        names = sorted(obj.attrs.keys())
    except Exception as e:
        raise ctx.fail(path, f"cannot list attributes: {e}", RefindexError) from e
    is_scale = False
    if "CLASS" in names:
        try:
            is_scale = jsonable(obj.attrs["CLASS"]) == "DIMENSION_SCALE"
        except Exception:
            is_scale = False
    for name in names:
        if name in HIDDEN_ATTRS or (is_scale and name in SCALE_ATTRS):
            continue
        try:
            aid = h5py.h5a.open(obj.id, name.encode("utf-8"))
            tid = aid.get_type()
            why = unsafe_type(tid)
            if why:
                raise UnsupportedError(why)
            try:
                value = attribute_value(aid)
            except OSError:
                if tid.get_class() != h5py.h5t.OPAQUE:
                    raise
                out[name] = opaque_attr(aid)  # h5py has no conversion path for this opaque type
                continue
        except Exception as e:
            reason = f"attribute {name!r} cannot be read by h5py: {e}"
            if ctx.opts.on_unsupported == "skip":
                ctx.tree.skipped.append({"path": path, "attribute": name, "reason": reason})
                continue
            raise ctx.fail(path, reason) from e
        out[name] = empty_as_netcdf(value) if ctx.nc_view and isinstance(value, h5py.Empty) else attr_json(ctx, value)
        lost = lost_type(value) if types is not None else None
        if lost:
            types[name] = lost
    return out


def empty_as_netcdf(value: h5py.Empty) -> Any:
    """An attribute without a value (null dataspace) as netCDF readers hand it over (h5netcdf):
    one-character text is "", anything else an empty array."""
    info = h5py.check_string_dtype(value.dtype)
    return "" if info is not None and info.length == 1 else []


def attr_json(ctx: ScanContext, value: Any) -> Any:
    """One attribute value as JSON; references as ``{"zarr_dtype": "object"|"region", "value": ...}``."""
    if isinstance(value, (h5py.Reference, h5py.RegionReference)):
        kind = "region" if isinstance(value, h5py.RegionReference) else "object"
        return {"zarr_dtype": kind, "value": ref_obj(ctx, value)}
    if isinstance(value, np.ndarray) and h5py.check_ref_dtype(value.dtype) is not None:
        return [attr_json(ctx, v) for v in value] if value.ndim else attr_json(ctx, value[()])  # nested: its shape
    return jsonable(value, lambda r: ref_obj(ctx, r))
