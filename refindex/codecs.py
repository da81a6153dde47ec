"""HDF5 filters and datatypes -> zarr v2 metadata.

Two questions are answered here for every dataset:

* Can the stored chunk bytes be decoded by a codec zarr can run?  (:func:`pipeline`)
* Are the bytes HDF5 stores the bytes zarr expects for the dtype?  (:func:`plan_dtype`)

When the answer to the second is no (variable-length data, references, compounds
with such members), the scanner reads the values through h5py and the plan says how
to encode them inline.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import h5py
import numcodecs  # every scan decodes or encodes a few chunks with it: loaded with the package
import numpy as np

# HDF5 filter ids
DEFLATE, SHUFFLE, FLETCHER32, SZIP, NBIT, SCALEOFFSET = 1, 2, 3, 4, 5, 6
LZF, BLOSC, LZ4, BITSHUFFLE, BZIP2, ZSTD, BLOSC2 = 32000, 32001, 32004, 32008, 307, 32015, 32026

FILTER_NAMES = {
    DEFLATE: "gzip",
    SHUFFLE: "shuffle",
    FLETCHER32: "fletcher32",
    SZIP: "szip",
    NBIT: "nbit",
    SCALEOFFSET: "scaleoffset",
    LZF: "lzf",
    BLOSC: "blosc",
    LZ4: "lz4",
    BITSHUFFLE: "bitshuffle",
    BZIP2: "bzip2",
    ZSTD: "zstd",
    BLOSC2: "blosc2",
}


class NoCodec(Exception):
    """A filter in the pipeline has no codec zarr can run."""


def filter_list(dcpl) -> list[tuple[int, int, tuple[int, ...], str]]:
    """The dataset's filter pipeline as (id, flags, cd_values, name), in write order."""
    out = []
    for i in range(dcpl.get_nfilters()):
        fid, flags, cd, name = dcpl.get_filter(i)
        name = name.decode("ascii", "replace") if isinstance(name, bytes) else str(name)
        out.append((int(fid), int(flags), tuple(int(v) for v in cd), name))
    return out


def _codec_for(fid: int, cd: tuple[int, ...], itemsize: int, chunk_nbytes: int) -> dict:
    if fid == DEFLATE:
        return {"id": "zlib", "level": int(cd[0]) if cd else 4}
    if fid == SHUFFLE:
        return {"id": "shuffle", "elementsize": int(cd[0]) if cd else itemsize}
    if fid == FLETCHER32:
        return {"id": "fletcher32"}
    if fid == ZSTD:
        return {"id": "zstd", "level": int(cd[0]) if cd else 0}
    if fid == BZIP2:
        return {"id": "bz2", "level": int(cd[0]) if cd else 9}
    if fid == BLOSC:
        # cd: [filter_rev, blosc_version, typesize, bufsize, clevel, shuffle, compressor]
        cnames = {0: "blosclz", 1: "lz4", 2: "lz4hc", 3: "snappy", 4: "zlib", 5: "zstd"}
        return {
            "id": "blosc",
            "cname": cnames.get(cd[6] if len(cd) > 6 else 0, "blosclz"),
            "clevel": int(cd[4]) if len(cd) > 4 else 5,
            "shuffle": int(cd[5]) if len(cd) > 5 else 1,
            "blocksize": 0,
        }
    if fid == LZF:
        return {"id": "refindex_h5lzf", "size": chunk_nbytes}
    if fid == LZ4:
        return {"id": "refindex_h5lz4", "blocksize": int(cd[0]) if cd else 0}
    if fid == BITSHUFFLE:
        # cd: [major, minor, elem_size, block_size, compression(0 none, 2 lz4, 3 zstd), level]
        elem = int(cd[2]) if len(cd) > 2 and cd[2] else itemsize
        return {
            "id": "refindex_h5bitshuffle",
            "itemsize": elem,
            "compression": int(cd[4]) if len(cd) > 4 else 0,
            "blocksize": int(cd[3]) if len(cd) > 3 else 0,
            "size": chunk_nbytes,
        }
    if fid == SZIP:
        # cd as stored by libhdf5: [options_mask, pixels_per_block, bits_per_pixel, pixels_per_scanline]
        if len(cd) < 4:
            raise NoCodec("szip filter without its parameters")
        return {
            "id": "refindex_h5szip",
            "options_mask": cd[0],
            "pixels_per_block": cd[1],
            "bits_per_pixel": cd[2],
            "pixels_per_scanline": cd[3],
        }
    name = FILTER_NAMES.get(fid, f"filter {fid}")
    raise NoCodec(f"no zarr codec for HDF5 {name} (filter id {fid})")


def pipeline(filters, itemsize: int, chunk_nbytes: int) -> tuple[list[dict] | None, dict | None]:
    """Map an HDF5 pipeline (write order) to zarr v2 ``(filters, compressor)``.

    zarr applies filters in order then the compressor when writing and the reverse when
    reading, exactly like HDF5's pipeline, so the last HDF5 filter becomes the
    compressor and the others stay filters in the same order.
    """
    codecs = [_codec_for(fid, cd, itemsize, chunk_nbytes) for fid, _flags, cd, _name in filters]
    if not codecs:
        return None, None
    return (codecs[:-1] or None), codecs[-1]


def codec_pipeline(filters: list[dict] | None, compressor: dict | None):
    """numcodecs objects for re-encoding inline chunks with an array's pipeline."""
    from . import h5codecs  # noqa: F401  (registers refindex codecs)

    register_codecs()
    chain = [numcodecs.get_codec(dict(c)) for c in (filters or [])]
    if compressor:
        chain.append(numcodecs.get_codec(dict(compressor)))
    return chain


_registered = False


def register_codecs() -> None:
    """Make refindex's HDF5-framing codecs known to numcodecs in this process."""
    global _registered
    if _registered:
        return
    from .h5codecs import H5Bitshuffle, H5Lz4, H5Lzf, H5StrPad, H5Szip

    for cls in (H5Lzf, H5Lz4, H5Bitshuffle, H5Szip, H5StrPad):
        numcodecs.register_codec(cls)
    _registered = True


def encode_chunk(data: np.ndarray, filters: list[dict] | None, compressor: dict | None) -> bytes:
    buf: Any = np.ascontiguousarray(data)
    for codec in codec_pipeline(filters, compressor):
        buf = codec.encode(buf)
    return bytes(buf) if not isinstance(buf, bytes) else buf


def string_padding(tid) -> dict | None:
    """A ``refindex_h5strpad`` filter for types holding fixed strings h5py normalises.

    Only NULL-terminated strings longer than one byte and space-padded strings are
    affected; NULL-padded strings are read as stored.
    """
    fields: list[list[int]] = []

    def walk(t, base: int) -> None:
        if isinstance(t, h5py.h5t.TypeStringID) and not t.is_variable_str():
            pad = t.get_strpad()
            size = t.get_size()
            if (pad == h5py.h5t.STR_NULLTERM and size > 1) or pad == h5py.h5t.STR_SPACEPAD:
                fields.append([base, size, 0 if pad == h5py.h5t.STR_NULLTERM else 2])
        elif isinstance(t, h5py.h5t.TypeCompoundID):
            for i in range(t.get_nmembers()):
                walk(t.get_member_type(i), base + t.get_member_offset(i))
        elif isinstance(t, h5py.h5t.TypeArrayID):
            sup = t.get_super()
            n = int(np.prod(t.get_array_dims()))
            for i in range(n):
                walk(sup, base + i * sup.get_size())

    walk(tid, 0)
    if not fields:
        return None
    return {"id": "refindex_h5strpad", "itemsize": tid.get_size(), "fields": fields}


# ---------------------------------------------------------------- dtypes


def _descr(dt: np.dtype) -> Any:
    """zarr v2 dtype description with the exact byte layout of ``dt``.

    zarr 3 reads structured dtypes as packed lists of ``[name, type]`` and rejects
    sub-array fields, so gaps between fields become explicit ``|V<n>`` pad fields and a
    sub-array field becomes a nested record with one field per element ("0", "1", ...).
    """
    if dt.names is None:
        if dt.subdtype is not None:
            base, shape = dt.subdtype
            n = int(np.prod(shape))
            return [[str(i), _descr(base)] for i in range(n)]
        return dt.str
    out = []
    pos = 0
    fields = sorted(((dt.fields[n][1], n) for n in dt.names))
    for off, name in fields:
        sub = dt.fields[name][0]
        if off > pos:
            out.append([f"refindex_pad_{pos}", f"|V{off - pos}"])
        elif off < pos:
            raise ValueError(f"compound datatype with overlapping fields ({name!r})")
        out.append([name, _descr(sub)])
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
            return DTypePlan(_descr(dt), True, _field_kind(dt), numpy_dtype=dt, attrs=attrs)
        return _plan_compound(dt, ref_to_json)

    if _raw_ok(dt):
        return DTypePlan(_descr(dt), True, "bytes" if dt.kind in "V" else ("str" if dt.kind == "S" else dt.name),
                         numpy_dtype=dt)

    raise ValueError(f"datatype {dt!r} has no zarr representation")


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


# ---------------------------------------------------------------- values


def fill_value_json(value: Any, dt: np.dtype) -> Any:
    """Encode an HDF5 fill value as zarr v2 .zarray ``fill_value``."""
    if value is None:
        return None
    arr = np.asarray(value)
    if dt.names is not None or dt.kind in "SV" or dt.subdtype is not None:
        raw = np.asarray(value, dtype=dt).tobytes() if arr.dtype != dt else arr.tobytes()
        if not any(raw) and dt.kind == "S":
            return ""
        return base64.standard_b64encode(raw).decode("ascii")
    scalar = arr.reshape(-1)[0] if arr.size else 0
    if dt.kind == "b":
        return bool(scalar)
    if dt.kind in "iu":
        return int(scalar)
    if dt.kind == "f":
        return _float_json(float(scalar))
    if dt.kind == "c":
        c = complex(scalar)
        return [_float_json(c.real), _float_json(c.imag)]
    return None


def _float_json(v: float) -> Any:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def jsonable(value: Any, ref_to_json_obj: Callable[[Any], Any] | None = None) -> Any:
    """Turn an h5py attribute or element value into plain JSON data.

    bytes become text (UTF-8, else Latin-1 so no byte is lost), numpy scalars become
    Python numbers, compound records become dicts, references go through
    ``ref_to_json_obj``.  NaN and infinities stay floats; the JSON writer emits them as
    ``NaN``/``Infinity``, which zarr's JSON reader accepts.
    """
    if isinstance(value, h5py.Empty) or value is None:
        return None
    if isinstance(value, (h5py.Reference, h5py.RegionReference)):
        if ref_to_json_obj is None:
            return None if not value else str(value)
        return ref_to_json_obj(value)
    if isinstance(value, (bytes, np.bytes_)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(value).decode("latin-1")
    if isinstance(value, str):
        return value
    if isinstance(value, np.void):
        if value.dtype.names:
            return {n: jsonable(value[n], ref_to_json_obj) for n in value.dtype.names}
        return base64.standard_b64encode(value.tobytes()).decode("ascii")
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (complex, np.complexfloating)):
        return [float(value.real), float(value.imag)]
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return jsonable(value[()], ref_to_json_obj)
        return [jsonable(v, ref_to_json_obj) for v in value]
    if isinstance(value, (list, tuple)):
        return [jsonable(v, ref_to_json_obj) for v in value]
    return str(value)
