"""The index as zarr format 3 documents: ``zarr.json`` per node, chunk keys ``c/i/j``.

The model (:mod:`refindex.model`) states arrays in zarr v2 terms: a numpy-style dtype
description, a v2 fill value, v2 ``filters`` + ``compressor``.  Those are the facts the
scanner established about the HDF5 bytes; this module only translates them, so the v2 and
v3 indexes of a file describe the same bytes (chunk references and inline chunks are
shared unchanged, under other keys).

* data types: numbers and bool by name (``int16``, ``float64``), the byte order moved to
  the ``bytes`` codec; ``|S<n>`` -> ``null_terminated_bytes`` (read as numpy ``S``, as the
  v2 index is); ``|V<n>`` (opaque, long double, complex256) -> ``raw_bytes``; ``<U<n>`` ->
  ``fixed_length_utf32``; datetime64/timedelta64 -> ``numpy.datetime64``/``numpy.timedelta64``;
  structured -> ``struct`` (packed: refindex's pad fields keep HDF5's layout, as in v2);
  ``|O`` + ``vlen-utf8``/``vlen-bytes`` -> ``string``/``variable_length_bytes``.
* One ``bytes`` codec states one byte order for a whole element, so a compound mixing
  byte orders is declared little-endian and read through ``numcodecs.refindex_byteswap``.
* codecs: :func:`refindex.codecs.v3_chain` (v2 pipeline order = v3 encode order).
* fill values: the v2 value decoded with the v2 dtype, in v3's form (``"NaN"``, ``[re, im]``,
  base64 for bytes, an object per struct).  A v2 ``null`` becomes the type's default, which
  is what zarr reads a v2 ``null`` as, so both indexes read unwritten chunks alike.
* consolidated metadata: the root ``zarr.json`` lists every node (``kind: inline``, flat
  relative paths); zarr takes it as the whole truth (a node missing there is invisible),
  so it is made from the very documents the per-node keys hold.

:func:`hierarchy` is what any v3 store writer starts from (the JSON and parquet writers
here; a repository writer alike): every node's document, and per array its chunk table
and inline chunks under v3 keys.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..codecs import BYTESWAP, OBJECT_CODECS, NoV3Codec, codec_names, dtype_of, v3_chain
from ..model import V3_KEYS, ArrayNode, ChunkTable, RefsDocument, Tree, inline_rows, key_of
from ._json import STREAM_BLOCK, write_json_stream
from ._parquet import write_parquet as write_parquet_records
from .pages import with_pages
from ._refs import FORMAT_VERSION, chunk_refs, metadata_json, url_templates

ZARR_FORMAT = 3
DEFAULT_ENCODING = {"name": "default", "configuration": {"separator": "/"}}
# fsspec's parquet reader finds a chunk from its "i.j" key and the array's .zarray (see write_parquet)
V2_ENCODING = {"name": "v2", "configuration": {"separator": "."}}


class NoV3Form(Exception):
    """This array (data type, fill value or codecs) has no zarr format 3 representation."""


# ---------------------------------------------------------------- data types


def numpy_dtype(descr: Any) -> np.dtype:
    """The numpy dtype of a v2 dtype description (:class:`NoV3Form` for a shaped field)."""
    try:
        return dtype_of(descr)
    except ValueError as e:
        raise NoV3Form(str(e)) from e


def _byte_orders(dt: np.dtype) -> set[str]:
    """The byte orders ('<' / '>') that matter in ``dt``, over every struct member."""
    if dt.names is not None:
        return set().union(*(_byte_orders(dt.fields[n][0]) for n in dt.names))
    if dt.kind in "SVb" or dt.itemsize == 1:
        return set()
    order = dt.byteorder
    if order == "=":
        order = "<" if np.little_endian else ">"
    return {order} if order in "<>" else set()


def _big_endian_members(dt: np.dtype, base: int = 0) -> list[list[int]]:
    """``[offset, unit, count]`` of every big-endian member of ``dt`` (what ``refindex_byteswap`` turns)."""
    if dt.names is not None:
        return [m for n in dt.names for m in _big_endian_members(dt.fields[n][0], base + dt.fields[n][1])]
    if _byte_orders(dt) != {">"}:
        return []
    unit = dt.itemsize // 2 if dt.kind == "c" else (4 if dt.kind == "U" else dt.itemsize)
    return [[base, unit, dt.itemsize // unit]]


def data_type(descr: Any, *, portable: bool = False) -> tuple[Any, str | None, dict[str, Any] | None]:
    """(v3 ``data_type``, byte order of the ``bytes`` codec or None, byte-swap codec or None)."""
    if descr == "|O":
        raise NoV3Form("object dtype without its object codec")
    dt = numpy_dtype(descr)
    orders = _byte_orders(dt)
    swap = None
    if len(orders) > 1:
        if portable:
            raise NoV3Form("a compound mixing byte orders needs refindex's own codec (refindex_byteswap) in "
                           "zarr v3, which a portable index may not name")
        swap = {"name": BYTESWAP, "configuration": {"itemsize": dt.itemsize, "fields": _big_endian_members(dt)}}
        orders = {"<"}
    endian = None if not orders else ("little" if orders == {"<"} else "big")
    if dt.names is not None and endian is None:
        endian = "little"  # zarr warns when a struct's bytes codec states no byte order
    return _type_json(dt), endian, swap


def _type_json(dt: np.dtype) -> Any:
    if dt.names is not None:
        return {"name": "struct", "configuration": {"fields": [
            {"name": n, "data_type": _type_json(dt.fields[n][0])} for n in dt.names]}}
    kind, size = dt.kind, dt.itemsize
    if dt.subdtype is not None:
        raise NoV3Form(f"sub-array type {dt}")
    if kind == "b":
        return "bool"
    if kind in "iu":
        return f"{'u' if kind == 'u' else ''}int{8 * size}"
    if kind == "f" and size in (2, 4, 8):
        return f"float{8 * size}"
    if kind == "c" and size in (8, 16):
        return f"complex{8 * size}"
    if kind == "S":
        return {"name": "null_terminated_bytes", "configuration": {"length_bytes": size}}
    if kind == "V":
        return {"name": "raw_bytes", "configuration": {"length_bytes": size}}
    if kind == "U":
        return {"name": "fixed_length_utf32", "configuration": {"length_bytes": size}}
    if kind in "Mm":
        unit, count = np.datetime_data(dt)
        return {"name": "numpy.datetime64" if kind == "M" else "numpy.timedelta64",
                "configuration": {"unit": unit, "scale_factor": int(count)}}
    raise NoV3Form(f"numpy type {dt} has no zarr v3 data type")


# ---------------------------------------------------------------- fill values


def _float_json(v: float) -> Any:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return float(v)


def scalar_json(value: Any, dt: np.dtype) -> Any:
    """A numpy scalar of ``dt`` in zarr v3's JSON form of a fill value."""
    if dt.names is not None:
        return {n: scalar_json(value[n], dt.fields[n][0]) for n in dt.names}
    kind = dt.kind
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    if kind == "f":
        return _float_json(float(value))
    if kind == "c":
        return [_float_json(float(np.real(value))), _float_json(float(np.imag(value)))]
    if kind in "SV":
        raw = bytes(np.asarray(value, dtype=dt).tobytes())
        return base64.standard_b64encode(raw.rstrip(b"\0") if kind == "S" else raw).decode("ascii")
    if kind == "U":
        return str(value)
    if kind in "Mm":
        return int(np.asarray(value, dtype=dt).astype(dt.newbyteorder("=")).view(np.int64))
    raise NoV3Form(f"no fill value form for {dt}")


def fill_value(v2_fill: Any, descr: Any) -> Any:
    """The v3 ``fill_value`` that reads as the v2 index's ``fill_value`` ``v2_fill`` of type ``descr``."""
    dt = numpy_dtype(descr)
    if v2_fill is None:  # zarr reads a v2 null fill as the type's default: zeros, NaT
        if dt.kind in "Mm":
            return int(np.iinfo(np.int64).min)
        return scalar_json(np.zeros((), dt)[()], dt)
    if dt.names is not None or dt.kind in "SV":
        if not isinstance(v2_fill, str):
            raise NoV3Form(f"fill value {v2_fill!r} of {descr} is not base64 text")
        raw = base64.standard_b64decode(v2_fill)
        if dt.kind == "S":
            return base64.standard_b64encode(raw.rstrip(b"\0")).decode("ascii")
        if len(raw) != dt.itemsize:
            raise NoV3Form(f"fill value of {len(raw)} bytes for a {dt.itemsize}-byte type")
        return scalar_json(np.frombuffer(raw, dtype=dt)[0], dt)
    if dt.kind == "c":
        re, im = (float(x) for x in v2_fill)
        return [_float_json(re), _float_json(im)]
    if dt.kind == "f":
        return _float_json(float(v2_fill))
    if dt.kind == "b":
        return bool(v2_fill)
    if dt.kind in "iuMm":
        if isinstance(v2_fill, float) and not v2_fill.is_integer():
            raise NoV3Form(f"fill value {v2_fill!r} of an integer type")
        return int(v2_fill)
    if dt.kind == "U":
        return str(v2_fill)
    raise NoV3Form(f"no fill value form for {descr}")


# ---------------------------------------------------------------- documents


def group_document(attrs: dict[str, Any]) -> dict[str, Any]:
    return {"zarr_format": ZARR_FORMAT, "node_type": "group", "attributes": attrs}


def _codecs(node: ArrayNode, endian: str | None, swap: dict | None, chunk_nbytes: int) -> list[dict[str, Any]]:
    chain = list(node.filters or []) + ([node.compressor] if node.compressor else [])
    if node.dtype == "|O":
        first = OBJECT_CODECS[chain[0]["id"]][1]
        chain = chain[1:]
    else:
        first = {"name": "bytes", "configuration": {"endian": endian}} if endian else {"name": "bytes"}
    try:
        rest = v3_chain(chain[:-1] or None, chain[-1] if chain else None, chunk_nbytes)
    except NoV3Codec as e:
        raise NoV3Form(str(e)) from e
    return [first] + ([swap] if swap else []) + rest


def array_document(node: ArrayNode, *, encoding: dict[str, Any] = DEFAULT_ENCODING,
                   portable: bool = False) -> dict[str, Any]:
    """The ``zarr.json`` document of one array (:class:`NoV3Form` when it has none).

    ``encoding``: the chunk key encoding stated (the default ``c/i/j``; parquet indexes
    state v2's).  ``portable``: refuse what would need one of refindex's codecs here.
    """
    shape = [int(s) for s in node.shape]
    chunks = [int(c) for c in node.chunks]
    if len(chunks) != len(shape) or any(c < 1 for c in chunks):
        raise NoV3Form(f"chunk shape {chunks} does not fit shape {shape}")
    if node.dtype == "|O":
        first = (node.filters or [{}])[0].get("id")
        if first not in OBJECT_CODECS:
            raise NoV3Form(f"object array without a vlen-utf8/vlen-bytes codec ({first!r})")
        dtype_json: Any = OBJECT_CODECS[first][0]
        fill: Any = ""
        codecs = _codecs(node, None, None, 0)
    else:
        dtype_json, endian, swap = data_type(node.dtype, portable=portable)
        fill = fill_value(node.fill_value, node.dtype)
        itemsize = numpy_dtype(node.dtype).itemsize
        codecs = _codecs(node, endian, swap, itemsize * int(np.prod(chunks, dtype=np.int64)))
    doc: dict[str, Any] = {
        "zarr_format": ZARR_FORMAT,
        "node_type": "array",
        "shape": shape,
        "data_type": dtype_json,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": encoding,
        "fill_value": fill,
        "codecs": codecs,
        "attributes": node.attrs,
        "storage_transformers": [],
    }
    if shape and node.dimension_names is not None and len(node.dimension_names) == len(shape):
        doc["dimension_names"] = list(node.dimension_names)
    return doc


def documents(tree: Tree, *, encoding: dict[str, Any] = DEFAULT_ENCODING) -> dict[str, dict[str, Any]]:
    """Node path ("" for the root, "a/b" below) -> its ``zarr.json`` document, sorted by path.

    Every array must have a v3 form (the pipeline refuses, or skips, those without one
    before anything is written).
    """
    docs = {key_of(path): group_document(g.attrs) for path, g in tree.groups.items()}
    docs.update({key_of(path): array_document(a, encoding=encoding) for path, a in tree.arrays.items()})
    if "" not in docs:
        docs[""] = group_document({})
    return dict(sorted(docs.items()))


def root_document(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The root ``zarr.json`` with every other node's document as inline consolidated metadata."""
    return dict(docs[""], consolidated_metadata={
        "kind": "inline", "must_understand": False, "metadata": {k: v for k, v in docs.items() if k}})


@dataclass
class V3Array:
    """The chunks of one array: references (a chunk table of grid coordinates) and inline bytes.

    ``inline`` is keyed by v3 chunk key (``c/0/1``, ``c`` for 0-d) and holds no chunk the
    table also references (the reference wins, as in the JSON index).
    """

    refs: ChunkTable | None
    inline: dict[str, bytes] = field(default_factory=dict)


@dataclass
class Hierarchy:
    """What a zarr v3 store of the index holds: documents by node path, chunks by array path."""

    documents: dict[str, dict[str, Any]]
    arrays: dict[str, V3Array]


def hierarchy(tree: Tree) -> Hierarchy:
    """Every node's ``zarr.json`` document (no consolidated block) and every array's chunks, v3 keys."""
    arrays: dict[str, V3Array] = {}
    for path in sorted(tree.arrays):
        a = tree.arrays[path]
        ndim = len(a.shape)
        refs = a.refs if a.refs is not None and len(a.refs) else None
        referenced = set(V3_KEYS.keys(refs.coords[inline_rows(refs.coords, a.inline)])) if (
            refs is not None and a.inline) else set()
        inline = {V3_KEYS.of_model_key(k, ndim): v for k, v in a.inline.items()}
        arrays[key_of(path)] = V3Array(refs, {k: v for k, v in inline.items() if k not in referenced})
    return Hierarchy(documents(tree), arrays)


def provenance(tree: Tree, *, holes: bool = False) -> dict[str, Any]:
    """The index's ``refindex`` section: the Tree's provenance, the format, what was skipped, the pages
    (``holes``: for a JSON index, which fills them from its own inline chunks)."""
    prov = dict(tree.provenance)
    prov["zarr_format"] = ZARR_FORMAT
    if tree.skipped:
        prov["skipped"] = tree.skipped
    return with_pages(prov, tree.pages, tree if holes else None)


def head_refs(tree: Tree) -> RefsDocument:
    """The v3 RFS dict without chunk entries: version, templates, every ``zarr.json``, provenance."""
    docs = documents(tree)
    refs: dict[str, Any] = {"zarr.json": metadata_json(root_document(docs))}
    for key, doc in docs.items():
        if key:
            refs[key + "/zarr.json"] = metadata_json(doc)
    return {"version": FORMAT_VERSION, "templates": url_templates(tree), "refs": refs,
            "refindex": provenance(tree, holes=True)}


def to_refs(tree: Tree) -> RefsDocument:
    """The RFS v1 dict of ``tree`` with zarr v3 metadata (metadata values are JSON text)."""
    out = head_refs(tree)
    for keys, values in chunk_refs(tree, out["templates"], V3_KEYS):
        out["refs"].update(zip(keys, values))
    return out


def write_json(tree: Tree, path: Any, *, head: RefsDocument | None = None,
               block: int = STREAM_BLOCK) -> dict[str, Any]:
    """Stream the v3 RFS JSON of ``tree`` to ``path`` from the chunk tables (see ``write_json_stream``)."""
    summary = write_json_stream(tree, path, block=block, head=head if head is not None else head_refs(tree),
                                encoding=V3_KEYS)
    summary["zarr_format"] = ZARR_FORMAT
    return summary


def codecs_of(tree: Tree) -> list[str]:
    """The v3 codec names the arrays of ``tree`` use (the provenance's ``codecs`` list)."""
    return codec_names(array_document(a) for a in tree.arrays.values())


# ---------------------------------------------------------------- parquet


def parquet_metadata(tree: Tree, record_size: int) -> dict[str, Any]:
    """The ``.zmetadata`` of a v3 parquet index (fsspec's ``LazyReferenceMapper`` layout).

    fsspec finds a chunk's record by splitting its key at the last ``/`` and the rest on
    ``.``, with the grid from ``<array>/.zarray``: so the arrays state zarr's v2 chunk key
    encoding (keys ``i.j``, ``0`` for 0-d; the records are the v2 layout's), and each has a
    shadow ``.zarray`` entry with only ``shape`` and ``chunks``, read by fsspec alone (zarr
    reading format 3 asks only for ``zarr.json`` keys).  Without them fsspec finds no chunk
    and zarr reads every array as its fill value, with no error.
    """
    docs = documents(tree, encoding=V2_ENCODING)
    meta: dict[str, Any] = {"zarr.json": root_document(docs)}
    for key, doc in docs.items():
        if not key:
            continue
        meta[key + "/zarr.json"] = doc
        if doc["node_type"] == "array":
            meta[key + "/.zarray"] = {"shape": doc["shape"], "chunks": doc["chunk_grid"]["configuration"]["chunk_shape"]}
    return {
        "metadata": dict(sorted(meta.items())),
        "record_size": int(record_size),
        "refindex": {"format": "parquet", "version": FORMAT_VERSION, "templates": url_templates(tree),
                     **provenance(tree)},
    }


def write_parquet(tree: Tree, out_dir: Any, *, record_size: int, compression: str = "zstd") -> dict[str, Any]:
    """Write ``tree`` as a v3 parquet index (:func:`parquet_metadata`) into the folder ``out_dir``, atomically."""
    summary = write_parquet_records(tree, out_dir, record_size=record_size, compression=compression,
                                    metadata=parquet_metadata(tree, record_size))
    summary["zarr_format"] = ZARR_FORMAT
    return summary
