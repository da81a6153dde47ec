"""HDF5 datatypes -> zarr dtypes: are the bytes HDF5 stores the bytes zarr expects?

When they are not (variable-length data, references, compounds with such members), the
scanner reads the values through h5py and the plan says how to encode them inline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import h5py
import numpy as np

from ._longdouble import holds_zarr_lacks, zarr_lacks
from ._values import jsonable

def view_dtype_attr(dt: np.dtype) -> Any:
    """How a reader turns raw-bytes (``|V16``) values back into numbers: ``arr.view(np.dtype(this))``
    (a compound's ``dtype.descr``, lists in JSON: ``np.dtype([tuple(f) for f in this])``)."""
    if dt.names is None and dt.subdtype is None:
        return dt.str
    return [list(f) for f in dt.descr]


def descr(dt: np.dtype) -> Any:
    """zarr v2 dtype description with the exact byte layout of ``dt``.

    zarr 3 reads structured dtypes as packed lists of ``[name, type]`` and rejects
    sub-array fields, so gaps between fields become explicit ``|V<n>`` pad fields and a
    sub-array field becomes a nested record with one field per element ("0", "1", ...).
    Long double and complex256 values, which zarr has no type for, are kept as their raw
    bytes (``|V16`` / ``|V32``).
    """
    if dt.names is None:
        if dt.subdtype is not None:
            base, shape = dt.subdtype
            n = int(np.prod(shape))
            return [[str(i), descr(base)] for i in range(n)]
        return f"|V{dt.itemsize}" if zarr_lacks(dt) else dt.str
    out = []
    pos = 0
    fields = sorted(((dt.fields[n][1], n) for n in dt.names))
    for off, name in fields:
        sub = dt.fields[name][0]
        if off > pos:
            out.append([f"refindex_pad_{pos}", f"|V{off - pos}"])
        elif off < pos:
            raise ValueError(f"compound datatype with overlapping fields ({name!r})")
        out.append([name, descr(sub)])
        pos = off + sub.itemsize
    if pos < dt.itemsize:
        out.append([f"refindex_pad_{pos}", f"|V{dt.itemsize - pos}"])
    return out


def _has_layout_changes(dt: np.dtype) -> bool:
    """True when ``_descr`` had to add pads or nest sub-arrays (recorded for readers)."""
    if dt.names is None:
        return dt.subdtype is not None
    pos = 0
    for off, name in sorted(((dt.fields[n][1], n) for n in dt.names)):
        sub = dt.fields[name][0]
        if off != pos or _has_layout_changes(sub):
            return True
        pos = off + sub.itemsize
    return pos != dt.itemsize


def _raw_ok(dt: np.dtype) -> bool:
    """Can zarr read HDF5's stored bytes of this dtype as they are?"""
    if dt.names is not None:
        return all(_raw_ok(dt.fields[n][0]) for n in dt.names)
    if dt.subdtype is not None:
        return _raw_ok(dt.subdtype[0])
    if h5py.check_vlen_dtype(dt) is not None or h5py.check_ref_dtype(dt) is not None:
        return False
    return dt.kind in "biufcSVMm"


@dataclass
class DTypePlan:
    """How one HDF5 datatype is represented in zarr.

    ``raw``: the file's bytes are used as they are (chunks by reference).
    Otherwise ``convert`` turns values read by h5py into an array zarr can encode with
    ``dtype``/``object_codec``, and the chunks are stored inline.
    """

    dtype: Any
    raw: bool
    kind: Any  # for conventions: numpy dtype name, "str", "bytes", "object", "region", or fields
    extra_shape: tuple[int, ...] = ()  # HDF5 array-class datasets gain trailing dims
    object_codec: dict | None = None
    convert: Callable[[np.ndarray], np.ndarray] | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    numpy_dtype: np.dtype | None = None


def _field_kind(dt: np.dtype) -> Any:
    if h5py.check_ref_dtype(dt) is h5py.Reference:
        return "object"
    if h5py.check_ref_dtype(dt) is h5py.RegionReference:
        return "region"
    if h5py.check_string_dtype(dt) is not None:
        return "str"
    if h5py.check_vlen_dtype(dt) is not None:
        return "vlen"
    if dt.names is not None:
        return [{"name": n, "dtype": _field_kind(dt.fields[n][0])} for n in dt.names]
    if dt.kind == "V":
        return "bytes"
    return dt.name


def plan_dtype(dt: np.dtype, ref_to_json: Callable[[Any], str]) -> DTypePlan:
    """Decide the zarr representation of HDF5 datatype ``dt`` (as h5py reports it)."""
    ref = h5py.check_ref_dtype(dt)
    if ref is not None:
        kind = "object" if ref is h5py.Reference else "region"

        def conv(a: np.ndarray) -> np.ndarray:
            out = np.empty(a.shape, dtype=object)
            flat_in, flat_out = a.reshape(-1), out.reshape(-1)
            for i, r in enumerate(flat_in):
                flat_out[i] = ref_to_json(r)
            return out

        return DTypePlan("|O", False, kind, object_codec={"id": "vlen-utf8"}, convert=conv)

    sinfo = h5py.check_string_dtype(dt)
    if sinfo is not None and sinfo.length is None:
        def conv_str(a: np.ndarray) -> np.ndarray:
            out = np.empty(a.shape, dtype=object)
            flat_in, flat_out = a.reshape(-1), out.reshape(-1)
            for i, v in enumerate(flat_in):
                flat_out[i] = v if isinstance(v, str) else bytes(v).decode("utf-8")
            return out

        return DTypePlan("|O", False, "str", object_codec={"id": "vlen-utf8"}, convert=conv_str)

    vlen = h5py.check_vlen_dtype(dt)
    if vlen is not None:
        # zarr 3 cannot open ragged (vlen-array) arrays: each sequence is JSON text.
        def conv_json(a: np.ndarray) -> np.ndarray:
            out = np.empty(a.shape, dtype=object)
            flat_in, flat_out = a.reshape(-1), out.reshape(-1)
            for i, v in enumerate(flat_in):
                flat_out[i] = json.dumps(jsonable(v, lambda r: json.loads(ref_to_json(r))), allow_nan=True)
            return out

        return DTypePlan(
            "|O", False, "vlen", object_codec={"id": "vlen-utf8"}, convert=conv_json,
            attrs={"refindex_encoding": "json"},
        )

    if dt.subdtype is not None:
        base, shape = dt.subdtype
        inner = plan_dtype(base, ref_to_json)
        if inner.raw:
            return DTypePlan(inner.dtype, True, inner.kind, extra_shape=tuple(shape) + inner.extra_shape,
                             attrs=inner.attrs, numpy_dtype=inner.numpy_dtype)

    enum = h5py.check_enum_dtype(dt)
    if enum is not None:
        base = np.dtype(dt.str)
        labels = {str(k): int(v) for k, v in enum.items()}
        return DTypePlan(base.str, True, base.name, attrs={"refindex_enum": labels}, numpy_dtype=base)

    if dt.names is not None:
        if _raw_ok(dt):
            attrs = {"refindex_layout": "fields padded/nested to keep HDF5's byte layout"} if _has_layout_changes(dt) else {}
            return DTypePlan(descr(dt), True, _field_kind(dt), numpy_dtype=dt, attrs=attrs | raw_number_attrs(dt))
        return _plan_compound(dt, ref_to_json)

    if _raw_ok(dt):
        return DTypePlan(descr(dt), True, "bytes" if dt.kind in "V" else ("str" if dt.kind == "S" else dt.name),
                         numpy_dtype=dt, attrs=raw_number_attrs(dt))

    raise ValueError(f"datatype {dt!r} has no zarr representation")


def raw_number_attrs(dt: np.dtype) -> dict[str, Any]:
    """For types holding long doubles: the numpy type a reader views the raw bytes as."""
    return {"refindex_view_dtype": view_dtype_attr(dt)} if holds_zarr_lacks(dt) else {}


def stored_as_numpy(tid: Any, dt: np.dtype) -> bool:
    """Are the bytes HDF5 stores for type ``tid`` the bytes numpy holds for ``dt`` (h5py's dtype)?

    Not for numbers in layouts numpy lacks, which h5py converts on read: floats of other
    sizes or bit fields (bfloat16, float24, another machine's long double), integers with
    a precision or bit offset of their own.  Those values must be copied in as converted.
    """
    h5t = h5py.h5t
    if isinstance(tid, h5t.TypeCompoundID) and dt.names is not None and tid.get_nmembers() == len(dt.names):
        return all(stored_as_numpy(tid.get_member_type(i), dt.fields[n][0]) for i, n in enumerate(dt.names))
    if isinstance(tid, h5t.TypeArrayID):
        return stored_as_numpy(tid.get_super(), dt.subdtype[0] if dt.subdtype is not None else dt)
    if isinstance(tid, h5t.TypeEnumID):
        base = tid.get_super()
        return stored_as_numpy(base, np.dtype(f"{'<' if base.get_order() == h5t.ORDER_LE else '>'}"
                                              f"{'i' if base.get_sign() else 'u'}{base.get_size()}"))
    if not isinstance(tid, (h5t.TypeIntegerID, h5t.TypeFloatID)) or dt.kind not in "iuf":
        return True
    try:
        ref = h5t.py_create(dt)
    except Exception:
        return True
    if type(ref) is not type(tid):
        return False
    keys = ["get_size", "get_order", "get_offset"]
    keys += ["get_fields", "get_ebias", "get_norm"] if isinstance(tid, h5t.TypeFloatID) else ["get_sign"]
    if not all(getattr(ref, k)() == getattr(tid, k)() for k in keys):
        return False
    if tid.get_precision() == ref.get_precision():
        return True
    # Unsigned integers of fewer bits from bit 0, zero-padded above (as libhdf5 writes them):
    # the stored bytes are the values.  Signed ones are not (no sign extension in the padding).
    return (isinstance(tid, h5t.TypeIntegerID) and tid.get_sign() == h5t.SGN_NONE
            and tid.get_pad()[1] == h5t.PAD_ZERO)


def describe_number_type(tid: Any) -> str:
    """A float type's layout in words (what ``refindex_hdf5_type`` records beside raw bytes)."""
    h5t = h5py.h5t
    if isinstance(tid, h5t.TypeCompoundID):
        parts = [f"{tid.get_member_name(i).decode()}: {describe_number_type(tid.get_member_type(i))}"
                 for i in range(tid.get_nmembers())]
        return "compound {" + "; ".join(parts) + "}"
    if isinstance(tid, h5t.TypeArrayID):
        return f"array {tuple(tid.get_array_dims())} of {describe_number_type(tid.get_super())}"
    if isinstance(tid, h5t.TypeIntegerID):
        sign = "signed" if tid.get_sign() != h5t.SGN_NONE else "unsigned"
        return (f"{sign} integer of {tid.get_size()} bytes, {tid.get_precision()}-bit precision at bit offset "
                f"{tid.get_offset()}, {'little' if tid.get_order() == h5t.ORDER_LE else 'big'}-endian")
    if not isinstance(tid, h5t.TypeFloatID):
        return f"{type(tid).__name__} of {tid.get_size()} bytes"
    spos, epos, esize, mpos, msize = tid.get_fields()
    order = "little-endian" if tid.get_order() == h5t.ORDER_LE else "big-endian"
    return (f"float of {tid.get_size()} bytes, {tid.get_precision()}-bit precision at bit offset "
            f"{tid.get_offset()}: sign bit {spos}, exponent bits {epos}-{epos + esize - 1} (bias "
            f"{tid.get_ebias()}), mantissa bits {mpos}-{mpos + msize - 1}, {order}")


def _plan_compound(dt: np.dtype, ref_to_json) -> DTypePlan:
    """Compounds holding vlen strings, sequences or references.

    zarr 3 cannot open structured dtypes with object fields, so each such field becomes
    a fixed-size bytes field sized to its longest value: UTF-8 text for strings, JSON
    text for references and sequences.  The field encoding is recorded in the
    ``refindex_fields`` attribute.
    """
    encodings: dict[str, str] = {}

    def ref_obj(r):
        return json.loads(ref_to_json(r))

    for name in dt.names:
        sub = dt.fields[name][0]
        if sub.subdtype is not None and not _raw_ok(sub):
            encodings[name] = "json"  # a sub-array of vlen/ref values: one JSON list per record
        elif h5py.check_ref_dtype(sub) is not None:
            encodings[name] = "json-ref"
        elif h5py.check_string_dtype(sub) is not None and h5py.check_string_dtype(sub).length is None:
            encodings[name] = "utf8"
        elif h5py.check_vlen_dtype(sub) is not None or not _raw_ok(sub):
            encodings[name] = "json"

    def conv(a: np.ndarray) -> np.ndarray:
        cols: dict[str, np.ndarray] = {}
        for name in dt.names:
            col = a[name]
            enc = encodings.get(name)
            if enc is None:
                cols[name] = col
                continue
            flat = col.reshape((a.size,) + col.shape[a.ndim:])
            if enc == "json-ref":
                texts = [ref_to_json(v) for v in flat]
            elif enc == "utf8":
                texts = [v if isinstance(v, str) else bytes(v).decode("utf-8") for v in flat]
            else:
                texts = [json.dumps(jsonable(v, ref_obj), allow_nan=True) for v in flat]
            width = max([len(t) for t in texts] + [1])
            cols[name] = np.array(texts, dtype=f"<U{width}").reshape(a.shape)
        packed = np.dtype([(n, cols[n].dtype if n in encodings else _packed(dt.fields[n][0])) for n in dt.names])
        out = np.empty(a.shape, dtype=packed)
        for name in dt.names:
            out[name] = cols[name]
        return out

    kind = [{"name": n, "dtype": _field_kind(dt.fields[n][0])} for n in dt.names]
    attrs: dict[str, Any] = {"refindex_fields": encodings}
    refs = [n for n, e in encodings.items() if e == "json-ref"]
    if refs:
        attrs["_REFERENCE_FIELDS"] = refs  # how hdmf-zarr knows which text fields are references
    return DTypePlan(None, False, kind, convert=conv, attrs=attrs)


def _packed(dt: np.dtype) -> np.dtype:
    if dt.names is None:
        if dt.subdtype is not None:
            return np.dtype((_packed(dt.subdtype[0]), dt.subdtype[1]))
        return dt
    return np.dtype([(n, _packed(dt.fields[n][0])) for n in dt.names])


def packed_dtype(dt: np.dtype) -> np.dtype:
    """``dt`` without padding between fields (what zarr's descr can express)."""
    return _packed(dt)

