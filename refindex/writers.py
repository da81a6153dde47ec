"""Serialise a Tree as a ReferenceFileSystem (version 1).

The zarr v2 metadata documents are written directly from the node model (the format
is small and frozen), never through zarr's write API.  Output is deterministic: keys
sorted, the same file gives the same bytes.  Files are written to a temporary name
in the destination folder and renamed, so a failed write never leaves a partial
index behind.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from typing import Any, Iterator

import numpy as np
import ujson

from .model import ArrayNode, Tree, key_of
from .scan import chunk_key

FORMAT_VERSION = 1


def _meta(obj: dict[str, Any]) -> str:
    # Python's json: NaN/Infinity literals in attributes are what zarr's reader accepts.
    return json.dumps(obj, allow_nan=True, sort_keys=True, ensure_ascii=False)


def zarray(node: ArrayNode) -> dict[str, Any]:
    return {
        "chunks": list(node.chunks),
        "compressor": node.compressor,
        "dtype": node.dtype,
        "fill_value": node.fill_value,
        "filters": node.filters,
        "order": "C",
        "shape": list(node.shape),
        "zarr_format": 2,
    }


def _prefix(path: str) -> str:
    k = key_of(path)
    return k + "/" if k else ""


def metadata_items(tree: Tree) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, document) for every .zgroup/.zattrs/.zarray, in sorted order."""
    items: list[tuple[str, dict[str, Any]]] = []
    for path, g in tree.groups.items():
        p = _prefix(path)
        items.append((p + ".zgroup", {"zarr_format": 2}))
        if g.attrs:
            items.append((p + ".zattrs", g.attrs))
    for path, a in tree.arrays.items():
        p = _prefix(path)
        items.append((p + ".zarray", zarray(a)))
        if a.attrs:
            items.append((p + ".zattrs", a.attrs))
    items.sort(key=lambda kv: kv[0])
    return iter(items)


def url_templates(tree: Tree) -> dict[str, str]:
    """Short names for every file the chunks point into: "u" for the scanned file."""
    urls = {tree.url}
    for a in tree.arrays.values():
        if a.refs is not None and a.refs.url:
            urls.add(a.refs.url)
    out = {"u": tree.url}
    for i, u in enumerate(sorted(urls - {tree.url})):
        out[f"u{i + 1}"] = u
    return out


def chunk_refs(tree: Tree, templates: dict[str, str]) -> Iterator[tuple[list[str], list[Any]]]:
    """(keys, values) per array: inline "base64:..." text, or [url, offset, size] per chunk.

    Built a column at a time from the numpy chunk tables (no per-chunk generator step).
    """
    by_url = {v: "{{" + k + "}}" for k, v in templates.items()}
    for path in sorted(tree.arrays):
        a = tree.arrays[path]
        p = _prefix(path)
        if a.inline:
            keys = [p + k for k in a.inline]
            yield keys, ["base64:" + base64.standard_b64encode(d).decode("ascii") for d in a.inline.values()]
        t = a.refs
        if t is None or not len(t):
            continue
        url = by_url[t.url or tree.url]
        yield ([p + k for k in _keys(t.coords)],
               [[url, off, size] for off, size in zip(t.offsets.tolist(), t.sizes.tolist())])


def _keys(coords: np.ndarray) -> list[str]:
    """Chunk keys "i.j.k" for an (n, ndim) coordinate array."""
    n, ndim = coords.shape
    if ndim == 0:
        return ["0"] * n
    cols = [coords[:, i].tolist() for i in range(ndim)]
    return list(map(".".join(["{}"] * ndim).format, *cols))


def consolidated(meta: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": meta, "zarr_consolidated_format": 1}


def to_refs(tree: Tree, *, consolidate: bool = True) -> dict[str, Any]:
    """The RFS dict of ``tree``; metadata values are JSON strings as the format requires."""
    templates = url_templates(tree)
    refs: dict[str, Any] = {}
    meta: dict[str, dict[str, Any]] = {}
    for key, doc in metadata_items(tree):
        refs[key] = _meta(doc)
        meta[key] = doc
    if consolidate:
        refs[".zmetadata"] = _meta(consolidated(meta))
    for keys, values in chunk_refs(tree, templates):
        refs.update(zip(keys, values))
    # Deterministic without sorting every chunk key: metadata sorted, then arrays in path
    # order with their chunks in chunk-index order (the same file lists them the same way).
    out: dict[str, Any] = {"version": FORMAT_VERSION, "templates": templates, "refs": refs}
    out["refindex"] = tree.provenance | ({"skipped": tree.skipped} if tree.skipped else {})
    return out


def dumps(refs: dict[str, Any]) -> str:
    return ujson.dumps(refs, escape_forward_slashes=False, ensure_ascii=False)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".refindex-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json(refs: dict[str, Any], path: str | os.PathLike) -> None:
    try:
        data = dumps(refs).encode("utf-8")
    except (UnicodeEncodeError, OverflowError, ValueError) as e:  # e.g. names that are not valid UTF-8
        from .errors import RefindexError

        raise RefindexError(f"cannot write the index as JSON: {e}", file=os.fspath(path)) from e
    atomic_write_bytes(path, data)
