"""The index as documents: zarr v2 metadata written straight from the node model (the format is
small and frozen, never through zarr's write API), URL templates, provenance, chunk entries.

Output is deterministic: keys sorted, the same file gives the same bytes.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Iterator

from ..model import V2_KEYS, ArrayNode, KeyEncoding, RefsDocument, Tree, key_of
from .pages import with_pages

FORMAT_VERSION = 1


def metadata_json(obj: Any) -> str:
    """A metadata document as text: Python's json, whose NaN/Infinity literals zarr's reader accepts."""
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


def prefix_of(path: str) -> str:
    k = key_of(path)
    return k + "/" if k else ""


def metadata_items(tree: Tree) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, document) for every .zgroup/.zattrs/.zarray, in sorted order."""
    items: list[tuple[str, dict[str, Any]]] = []
    for path, g in tree.groups.items():
        p = prefix_of(path)
        items.append((p + ".zgroup", {"zarr_format": 2}))
        if g.attrs:
            items.append((p + ".zattrs", g.attrs))
    for path, a in tree.arrays.items():
        p = prefix_of(path)
        items.append((p + ".zarray", zarray(a)))
        if a.attrs:
            items.append((p + ".zattrs", a.attrs))
    items.sort(key=lambda kv: kv[0])
    return iter(items)


def url_templates(tree: Tree) -> dict[str, str]:
    """Short names for every file the chunks point into: "u" for the scanned file."""
    urls = {tree.url}
    for a in tree.arrays.values():
        if a.refs is not None:
            urls.update(u for u in a.refs.all_urls() if u)
    out = {"u": tree.url}
    for i, u in enumerate(sorted(urls - {tree.url})):
        out[f"u{i + 1}"] = u
    return out


def chunk_refs(tree: Tree, templates: dict[str, str],
               encoding: KeyEncoding = V2_KEYS) -> Iterator[tuple[list[str], list[Any]]]:
    """(keys, values) per array: inline "base64:..." text, or [url, offset, size] per chunk.

    Built a column at a time from the numpy chunk tables (no per-chunk generator step);
    chunk keys in ``encoding`` (zarr v2's by default).
    """
    by_url = {v: "{{" + k + "}}" for k, v in templates.items()}
    for path in sorted(tree.arrays):
        a = tree.arrays[path]
        p = prefix_of(path)
        ndim = len(a.shape)
        if a.inline:
            keys = [p + encoding.of_model_key(k, ndim) for k in a.inline]
            yield keys, ["base64:" + base64.standard_b64encode(d).decode("ascii") for d in a.inline.values()]
        t = a.refs
        if t is None or not len(t):
            continue
        keys = [p + k for k in encoding.keys(t.coords)]
        if t.url_index is not None:  # chunks spread over several files (virtual datasets)
            names = [by_url[u or tree.url] for u in t.all_urls()]
            yield keys, [[names[j], off, size]
                         for j, off, size in zip(t.url_index.tolist(), t.offsets.tolist(), t.sizes.tolist())]
            continue
        url = by_url[t.url or tree.url]
        yield keys, [[url, off, size] for off, size in zip(t.offsets.tolist(), t.sizes.tolist())]


def consolidated(meta: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": meta, "zarr_consolidated_format": 1}


def to_refs(tree: Tree, *, consolidate: bool = True) -> RefsDocument:
    """The RFS dict of ``tree``; metadata values are JSON strings as the format requires."""
    out = head_refs(tree, consolidate=consolidate)
    # Deterministic without sorting every chunk key: metadata sorted, then arrays in path
    # order with their chunks in chunk-index order (the same file lists them the same way).
    for keys, values in chunk_refs(tree, out["templates"]):
        out["refs"].update(zip(keys, values))
    return out


def head_refs(tree: Tree, *, consolidate: bool = True) -> RefsDocument:
    """``to_refs(tree)`` without the chunk references: version, templates, metadata, provenance.

    Small whatever the chunk count; it is what the safety checks read (codecs in
    ``.zarray``, secrets in templates/provenance), and the head of the streamed JSON.
    """
    refs: dict[str, Any] = {}
    meta: dict[str, dict[str, Any]] = {}
    for key, doc in metadata_items(tree):
        refs[key] = metadata_json(doc)
        meta[key] = doc
    if consolidate:
        refs[".zmetadata"] = metadata_json(consolidated(meta))
    out: RefsDocument = {"version": FORMAT_VERSION, "templates": url_templates(tree), "refs": refs}
    out["refindex"] = with_pages(tree.provenance | ({"skipped": tree.skipped} if tree.skipped else {}), tree.pages,
                                 tree)  # a JSON index: holes filled from its own inline chunks
    return out
