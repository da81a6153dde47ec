"""hdmf-zarr 0.14's zarr v3 storage convention (read by ``hdmf_zarr.nwb.NWBZarrIO``), for zarr v3 indexes.

It takes the place of the v2 ``hdmf`` convention; its target is what hdmf-zarr writes when
it exports an HDF5 NWB file (``NWBZarrIO.export``), document by document:

* links (soft links, further names of hard-linked groups, external links) are ``_LINKS``
  entries ``{"name", "source", "path"}`` on the parent group; ``source`` is ``"."`` in the
  same file, else the other file's path relative to this file's folder (as in v2); no
  object ids (hdmf-zarr's v3 convention dropped them); further names of hard-linked
  datasets are arrays of their own, as in v2 (:func:`~._links.hard_linked_arrays`);
* object references in attributes are ``{"_REFERENCE": {"source": ".", "path": "/..."}}``;
* object-reference datasets hold absolute target paths as text (``string`` + ``vlen-utf8``)
  with ``_DTYPE: "object_reference"``: the scanner stored each reference as JSON text
  inline, so those chunks are decoded and re-encoded here;
* compounds with reference members hold target paths in text members at least 512
  characters wide (hdmf-zarr's width), named in ``_REFERENCE_FIELDS``; compounds carry no
  ``_DTYPE``;
* every other dataset has ``_DTYPE``: numpy's type name for numbers (``int16``,
  ``float64``, ``bool``), ``"str"`` for text;
* scalars stay 0-d, without ``_ARRAY_DIMENSIONS``; ``.specloc`` is the path of the cached
  specifications, whose documents carry no attributes;
* text, cached specifications and attribute types as :mod:`._hdmftext` says (as in v2);
* ``_ARRAY_DIMENSIONS`` stays an attribute (hdmf-zarr writes it) and is also the array's
  ``dimension_names``: h5netcdf's names (:mod:`._ncdims`), as xarray names them over the file.

refindex's documented extensions stay as in v2 where hdmf-zarr has no form: region
references (JSON text, ``_DTYPE: "region"``; in attributes ``{"zarr_dtype": "region",
"value"}``, which hdmf-zarr refuses loudly rather than misreading), sequences as JSON text.
A null or dangling object reference has no path form (a path cannot say "nothing"), so its
dataset is refused: :func:`apply_hdmf3` returns ``(path, reason)`` for each, and the caller
applies the scan's ``on_unsupported``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .. import codecs, urls
from ..model import ArrayNode, LinkNode, Tree, join
from ._hdmftext import decoded_chunk, present_text, record_attribute_types
from ._links import hard_linked_arrays
from ._ncdims import name_dimensions

REFERENCE_DTYPE = "object_reference"
MIN_COMPOUND_TEXT = 512  # hdmf-zarr's COMPOUND_DTYPE_MIN_STRING_LENGTH: matched so documents agree


class _NoForm(Exception):
    pass


def apply_hdmf3(tree: Tree) -> list[tuple[str, str]]:
    """Rewrite ``tree`` in place into hdmf-zarr 0.14's v3 convention; returns what has no form in it."""
    hard_linked_arrays(tree)
    name_dimensions(tree)  # as the v2 convention: xarray names them as over the file
    for link in sorted(tree.links, key=lambda item: join(item.parent, item.name)):
        group = tree.groups.get(link.parent)
        if group is not None:
            group.attrs.setdefault("_LINKS", []).append(_link_entry(tree, link))
    root = tree.groups.get("/")
    specloc = _specloc_path(root.attrs[".specloc"]) if root is not None and ".specloc" in root.attrs else None
    if specloc is not None:
        root.attrs[".specloc"] = specloc
    present_text(tree, specloc)
    record_attribute_types(tree)
    for group in tree.groups.values():
        group.attrs = {k: (v if k == ".specloc" else _attr_value(v)) for k, v in group.attrs.items()}
    spec_prefix = "/" + specloc.strip("/") + "/" if specloc else None
    refused: list[tuple[str, str]] = []
    for path in sorted(tree.arrays):
        node = tree.arrays[path]
        node.attrs = {k: _attr_value(v) for k, v in node.attrs.items()}
        try:
            _dataset(node, spec=bool(spec_prefix and path.startswith(spec_prefix)))
        except _NoForm as e:
            refused.append((path, f"no hdmf-zarr v3 form: {e}"))
    return refused


# ---------------------------------------------------------------- links and attributes


def _link_entry(tree: Tree, link: LinkNode) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": link.name, "source": ".", "path": link.target}
    if link.kind == "external":
        entry["source"] = urls.relative(tree.url, link.file or "")
    if link.kind not in ("soft", "hard", "external") or not link.resolved:
        # hdmf-zarr fails on these when it reads them (as it should): say what they were
        entry["refindex_link_type"] = link.kind + ("" if link.resolved else " (unresolved)")
    return entry


def _specloc_path(value: Any) -> str | None:
    """``.specloc`` as hdmf-zarr writes it: the specifications group's path, no leading slash."""
    if isinstance(value, str):
        return value.strip("/")
    if isinstance(value, dict) and isinstance(value.get("value"), dict):
        path = value["value"].get("path")
        if isinstance(path, str):
            return path.strip("/")
    return None


def _attr_value(value: Any) -> Any:
    """The scan's object references in attributes (``{"zarr_dtype": "object", "value"}``) as ``_REFERENCE``."""
    if isinstance(value, list):
        return [_attr_value(v) for v in value]
    if isinstance(value, dict) and value.get("zarr_dtype") == "object" and set(value) == {"zarr_dtype", "value"}:
        ref = value["value"]
        if isinstance(ref, dict) and isinstance(ref.get("path"), str):
            return {"_REFERENCE": {"source": ".", "path": _absolute(ref["path"])}}
        # null or dangling: left in refindex's form, which hdmf-zarr refuses to read
    return value


def _absolute(path: str) -> str:
    return path if path.startswith("/") else "/" + path


# ---------------------------------------------------------------- datasets


def _dtype_name(kind: Any) -> str:
    """``_DTYPE`` of a non-compound dataset, from the scan's ``kind``."""
    if kind in ("str", "bytes", "region", "vlen"):
        return str(kind)
    if kind == "object":
        return REFERENCE_DTYPE
    try:
        return np.dtype(str(kind)).type.__name__  # numpy 2: int16, float64, bool, uint8, ...
    except TypeError:
        return str(kind)


def _dataset(node: ArrayNode, *, spec: bool) -> None:
    if not node.shape or node.scalar or spec:  # hdmf-zarr writes no dimensions for scalars and specs
        node.attrs.pop("_ARRAY_DIMENSIONS", None)
    dims = node.attrs.get("_ARRAY_DIMENSIONS")
    if isinstance(dims, list) and len(dims) == len(node.shape) and all(isinstance(d, str) for d in dims):
        node.dimension_names = list(dims)
    if spec:  # cached specifications: no attributes at all
        return
    if isinstance(node.kind, list):
        _compound(node)
        return
    if node.kind == "object":
        _reference_paths(node)
    node.attrs["_DTYPE"] = _dtype_name(node.kind)


def _path_of(text: str) -> str:
    """A target path from the scan's JSON text of one reference ("" stays "": edge-chunk padding)."""
    if text == "":
        return ""
    try:
        ref = json.loads(text)
    except ValueError as e:
        raise _NoForm(f"reference text is not JSON: {text[:80]!r}") from e
    if ref is None:
        raise _NoForm("a null object reference (hdmf-zarr v3 stores references as target paths)")
    path = ref.get("path") if isinstance(ref, dict) else None
    if not isinstance(path, str):
        why = ref.get("error") if isinstance(ref, dict) else None
        raise _NoForm(f"an object reference with no target path ({why or text[:80]})")
    return _absolute(path)


def _reference_paths(node: ArrayNode) -> None:
    """An object-reference dataset's inline JSON chunks re-encoded as target paths."""
    if node.dtype != "|O" or not node.filters or node.filters[0].get("id") != "vlen-utf8":
        raise _NoForm(f"reference dataset stored as {node.dtype} {node.filters}")
    if node.refs is not None and len(node.refs):
        raise _NoForm("reference dataset with chunks referenced in the file (they must be inline)")
    for key, data in list(node.inline.items()):
        texts = np.asarray(decoded_chunk(node, data), dtype=object)
        paths = np.array([_path_of(str(t)) for t in texts.reshape(-1)], dtype=object).reshape(texts.shape)
        node.inline[key] = codecs.encode_chunk(paths, node.filters, node.compressor)


def _compound(node: ArrayNode) -> None:
    """Members holding object references become target paths, named in ``_REFERENCE_FIELDS``."""
    encodings = node.attrs.get("refindex_fields") or {}
    kinds = {f["name"]: f["dtype"] for f in node.kind}
    ref_fields = [n for n, enc in encodings.items() if enc == "json-ref" and kinds.get(n) == "object"]
    node.attrs.pop("_REFERENCE_FIELDS", None)
    if not ref_fields:
        return
    if not isinstance(node.dtype, list) or node.filters:
        raise _NoForm(f"compound with references stored as {node.dtype} with filters {node.filters}")
    if node.refs is not None and len(node.refs):
        raise _NoForm("compound with references whose chunks are referenced in the file (they must be inline)")
    dt = codecs.dtype_of(node.dtype)
    decoded: dict[str, np.ndarray] = {}
    paths: dict[str, dict[str, np.ndarray]] = {}
    width = dict.fromkeys(ref_fields, MIN_COMPOUND_TEXT)
    for key, data in node.inline.items():
        arr = np.frombuffer(bytes(decoded_chunk(node, data)), dtype=dt).reshape(tuple(node.chunks))
        decoded[key], paths[key] = arr, {}
        for name in ref_fields:
            flat = [_path_of(str(t)) for t in arr[name].reshape(-1)]
            width[name] = max([width[name]] + [len(p) for p in flat])
            paths[key][name] = np.array(flat, dtype=object).reshape(arr.shape)
    new_dt = np.dtype([(n, f"<U{width[n]}" if n in width else dt.fields[n][0]) for n in dt.names])
    for key, arr in decoded.items():
        out = np.zeros(arr.shape, dtype=new_dt)
        for name in dt.names:
            out[name] = paths[key][name] if name in width else arr[name]
        node.inline[key] = codecs.encode_chunk(out, None, node.compressor)
    node.dtype = [[f[0], new_dt.fields[f[0]][0].str] if f[0] in width else list(f) for f in node.dtype]
    node.fill_value = None  # zeros: empty paths and zero numbers, as the v2 fill was
    node.attrs["_REFERENCE_FIELDS"] = ref_fields
    node.attrs["refindex_fields"] = {n: ("path-ref" if n in width else enc) for n, enc in encodings.items()}
