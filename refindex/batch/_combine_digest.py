"""What the combine keeps of one file's index: metadata, chunk columns, the values it must compare.

A digest is made from the file's JSON index as soon as the file is done and is small: the
root attributes and each root array's ``.zarray``/``.zattrs``, its chunks as numpy columns
(grid position, file number in the digest's URL table or -1 for bytes held inline, offset,
size) with inline bytes in one buffer, the concat coordinate's stored values, and a hash of
the values of every other coordinate (to check that files claimed to share a grid do).
Values are read the way zarr reads a v2 array (zarr's reading of the ``.zarray``, each chunk
decoded by the readers' :func:`refindex.read.nwb.decode_chunk`), from the index's inline bytes
or the source's byte ranges; the index is loaded as every reader loads one
(:func:`refindex.read.load_refs`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import urls
from ..errors import RefindexError


@dataclass
class ChunkColumns:
    """The chunks of one array in one file."""

    coords: np.ndarray  # (n, ndim) int64 grid positions (a scalar's one chunk: ndim 0)
    url: np.ndarray  # int32 into FileDigest.urls; -1: inline, offset/size into FileDigest.inline
    offset: np.ndarray  # int64
    size: np.ndarray  # int64


@dataclass
class FileDigest:
    source: str
    attrs: dict[str, Any]
    zarrays: dict[str, dict[str, Any]]
    zattrs: dict[str, dict[str, Any]]
    chunks: dict[str, ChunkColumns]
    urls: list[str]
    inline: bytes
    values: dict[str, np.ndarray] = field(default_factory=dict)  # the concat coordinate's stored numbers
    hashes: dict[str, str] = field(default_factory=dict)  # other coordinates: hash of their values
    decoded: Any = None  # (steps, Encoding) of the concat coordinate once decoded (kept in the combine's state)

    def dims(self, name: str) -> list[str]:
        return list(self.zattrs[name].get("_ARRAY_DIMENSIONS") or [])


def coordinate_names(zattrs: dict[str, dict[str, Any]], root_attrs: dict[str, Any]) -> set[str]:
    """What xarray makes coordinates: dimension coordinates and names in ``coordinates`` attributes."""
    out = {n for n, a in zattrs.items() if list(a.get("_ARRAY_DIMENSIONS") or []) == [n]}
    for attrs in [root_attrs, *zattrs.values()]:
        text = attrs.get("coordinates")
        if isinstance(text, str):
            out.update(n for n in text.split() if n in zattrs)
    return out


def load_index(index: str, storage_options: dict[str, Any] | None, fetched: Future | None = None) -> dict[str, Any]:
    """The file's JSON index as every reader loads it (:func:`refindex.read.load_refs`: one request, retried;
    ``fetched``: that request made already, its bytes or error)."""
    from ..read import load_refs

    try:
        doc = load_refs(index, storage_options, fetched)
    except RefindexError as e:  # a missing or damaged index: say which, and that the combine needed it
        raise RefindexError(f"cannot read the index to combine it: {e.reason}", file=index) from e
    if not isinstance(doc, dict):  # a parquet folder
        raise RefindexError("combining needs JSON indexes of the files, not parquet", file=index)
    return doc if "refs" in doc else {"refs": doc}


def metadata_of(refs: dict[str, Any]) -> dict[str, Any]:
    """Every metadata document of the index, from ``.zmetadata`` or the keys themselves."""
    if ".zmetadata" in refs:
        return dict(json.loads(refs[".zmetadata"])["metadata"])
    return {k: json.loads(v) for k, v in refs.items() if k.rsplit("/", 1)[-1] in (".zarray", ".zattrs", ".zgroup")}


def digest(source: str, index: str, dim: str, storage_options: dict[str, Any] | None,
           fetched: Future | None = None) -> FileDigest:
    """The digest of ``source``'s index at ``index`` for a combine along ``dim`` (``fetched``: its bytes read
    already, see :func:`load_index`)."""
    from ..read.index._urlcheck import expand_url

    doc = load_index(index, storage_options, fetched)
    refs, templates = doc["refs"], doc.get("templates") or {}
    meta = metadata_of(refs)
    if "zarr.json" in refs or ".zgroup" not in meta:
        raise RefindexError("combining needs zarr v2 indexes (a .zgroup at the root)", file=index)
    zarrays = {k[:-8]: v for k, v in meta.items() if k.endswith("/.zarray") and "/" not in k[:-8]}
    zattrs = {n: meta.get(n + "/.zattrs", {}) for n in zarrays}
    d = FileDigest(source, dict(meta.get(".zattrs", {})), zarrays, zattrs, {}, [], b"")
    rows: dict[str, list[tuple[tuple[int, ...], Any]]] = {n: [] for n in zarrays}
    for key, value in refs.items():
        name, _, chunk = key.rpartition("/")
        if name in rows and not chunk.startswith("."):
            rows[name].append((tuple(int(c) for c in chunk.split(".")) if zarrays[name]["shape"] else (), value))
    url_ids: dict[str, int] = {}
    blob = bytearray()
    for name, items in rows.items():
        d.chunks[name] = chunk_columns(items, len(zarrays[name]["shape"]), url_ids, blob,
                                       lambda u: expand_url(u, templates))
    d.urls, d.inline = list(url_ids), bytes(blob)
    coords = coordinate_names(zattrs, d.attrs)
    for name in sorted(coords):
        if dim in d.dims(name):
            if name == dim:
                d.values[name] = array_values(d, name, storage_options)
        else:
            d.hashes[name] = values_hash(array_values(d, name, storage_options))
    return d


def chunk_columns(items: list[tuple[tuple[int, ...], Any]], ndim: int, url_ids: dict[str, int], blob: bytearray,
                  expand: Any) -> ChunkColumns:
    n = len(items)
    coords = np.zeros((n, ndim), dtype=np.int64)
    url = np.zeros(n, dtype=np.int32)
    offset = np.zeros(n, dtype=np.int64)
    size = np.zeros(n, dtype=np.int64)
    for i, (pos, value) in enumerate(items):
        coords[i] = pos
        if isinstance(value, str):
            data = base64.standard_b64decode(value[7:]) if value.startswith("base64:") else value.encode("utf-8")
            url[i], offset[i], size[i] = -1, len(blob), len(data)
            blob += data
        elif isinstance(value, list) and len(value) == 3:
            url[i] = url_ids.setdefault(expand(str(value[0])), len(url_ids))
            offset[i], size[i] = int(value[1]), int(value[2])
        else:
            raise RefindexError(f"a chunk reference the combine cannot take: {str(value)[:80]}")
    return ChunkColumns(coords, url, offset, size)


def array_values(d: FileDigest, name: str, storage_options: dict[str, Any] | None) -> np.ndarray:
    """The stored (not decoded) values of array ``name``, as zarr reads them: zarr's reading of its
    ``.zarray`` and each chunk decoded by :func:`refindex.read.nwb.decode_chunk` (zarr's codec order)."""
    from zarr.core.metadata.v2 import ArrayV2Metadata

    from ..codecs import register_codecs, register_stock_codecs
    from ..read.nwb import decode_chunk

    register_codecs()
    register_stock_codecs()
    meta = ArrayV2Metadata.from_dict({**d.zarrays[name], "zarr_format": 2})
    dtype = meta.dtype.to_native_dtype()
    fill = meta.fill_value if meta.fill_value is not None else (None if dtype.kind == "O" else 0)
    out = np.full(meta.shape, fill, dtype=dtype)
    cols = d.chunks[name]
    for pos, data in zip(cols.coords.tolist(), fetch(d, cols, storage_options)):
        where = tuple(slice(p * c, min((p + 1) * c, s)) for p, c, s in zip(pos, meta.chunks, meta.shape))
        out[where] = decode_chunk(meta, data)[tuple(slice(0, w.stop - w.start) for w in where)]
    return out


def fetch(d: FileDigest, cols: ChunkColumns, storage_options: dict[str, Any] | None) -> list[bytes]:
    """The stored bytes of each chunk in ``cols``: inline ones from the digest, others in one batch per file."""
    out: list[bytes] = [b""] * len(cols.url)
    for u in set(cols.url.tolist()) - {-1}:
        rows = np.flatnonzero(cols.url == u)
        fs, path = urls.filesystem(d.urls[u], storage_options)
        starts = cols.offset[rows].tolist()
        ends = (cols.offset[rows] + cols.size[rows]).tolist()
        for r, data in zip(rows.tolist(), fs.cat_ranges([path] * len(rows), starts, ends)):
            out[r] = bytes(data)
    for r in np.flatnonzero(cols.url == -1).tolist():
        out[r] = d.inline[int(cols.offset[r]):int(cols.offset[r] + cols.size[r])]
    return out


def values_hash(values: np.ndarray) -> str:
    h = hashlib.sha256(f"{values.dtype.str}{values.shape}".encode())
    h.update(str(values.tolist()).encode() if values.dtype.kind == "O" else np.ascontiguousarray(values).tobytes())
    return h.hexdigest()

