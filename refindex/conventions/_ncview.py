"""What netCDF readers see, for the plain convention: names, dimensions and attributes as xarray
shows them over the HDF5 file (``engine="h5netcdf"``).

* dimension names: h5netcdf's (:mod:`._ncdims`), where the scan recorded what they come from;
* attribute values: a one-element array is its element, as netCDF readers hand it over
  (netCDF writers store scalar attributes that way; xarray needs ``coordinates`` as text
  and ``scale_factor`` as a number);
* a dataset without a dataspace (HDF5's null dataspace: no elements, not even one) stays the
  scan's empty array of shape ``(0,)``: every reader reads nothing from it, as h5py does
  (``h5py.Empty``).  netCDF readers show a 0-d variable that fails when read; a 0-d zarr array
  would read as its fill value, a value the file does not hold.  Its one axis is named
  :data:`NULL_DIM` (of size 0 in every group, so it cannot conflict with a dimension netCDF's
  rules name; another name where the file uses that one);
* variable-length UTF-8 text is fixed-width text as wide as its longest value (``<U<n>``), which
  is what xarray makes of it over netCDF files (zarr would hand xarray numpy's
  ``StringDType``; ASCII text stays variable-length, as xarray keeps it over netCDF files); beyond :data:`MAX_FIXED_TEXT` bytes, or where a value ends in NUL
  (which fixed-width text drops), it stays variable-length;
* netCDF-4's ``_nc4_non_coord_<name>`` (a variable named like a dimension it does not
  index) is the variable ``<name>``, where the index has no other node of that name;
* attributes no netCDF reader shows (HDF5's ``CLASS``/``NAME``, netCDF-C's ``_NCProperties``
  and ``_nc3_strict``) and refindex's own notes on a node (``refindex_*``, unmaterialised
  links in ``zarr_link``) leave the zarr attributes for the index's provenance
  (:func:`keep_aside`), where readers that need them (verify) find them and xarray does not.
"""

from __future__ import annotations

import posixpath
from typing import Any

import numpy as np

from ..codecs import codec_pipeline, descr, encode_chunk
from ..model import ArrayNode, Tree
from ._ncdims import name_dimensions

NON_COORD = "_nc4_non_coord_"
# HDF5 attributes h5netcdf hides beyond those the scanner never reads (DIMENSION_LIST, ...)
READER_HIDDEN = frozenset({"CLASS", "NAME", "_nc3_strict", "_NCProperties"})
# refindex's notes that are not refindex_* names
NOTES = frozenset({"zarr_link"})
ASIDE = "hidden_attributes"  # the provenance section: node path -> {name: value}
RENAMED = "renamed"  # the provenance section: index path -> HDF5 path
MAX_FIXED_TEXT = 64 << 20  # variable-length text made fixed-width up to this many bytes (4 per character)
TEXT_COMPRESSOR = {"id": "zlib", "level": 1}
NULL_DIM = "null_dataspace"  # the dimension of the empty arrays that stand for null dataspaces


def netcdf_view(tree: Tree) -> None:
    """Rewrite the plain ``tree`` in place into what xarray over h5netcdf shows (see the module)."""
    name_dimensions(tree)
    name_null_dimensions(tree)
    for node in list(tree.groups.values()) + list(tree.arrays.values()):
        for name, value in node.attrs.items():
            if name != "_ARRAY_DIMENSIONS" and name not in NOTES and not name.startswith("refindex_"):
                node.attrs[name] = netcdf_value(value)
    for node in tree.arrays.values():
        if node.kind == "str" and node.charset == "utf-8" and node.dtype == "|O" and not node.refs:
            fixed_width_text(node)
    rename_non_coordinates(tree)


def name_null_dimensions(tree: Tree) -> None:
    """The axis of every null dataspace's empty array is :data:`NULL_DIM` (see the module), or
    ``NULL_DIM_<n>`` where the file has a dimension or a node of that name."""
    nulls = [n for n in tree.arrays.values() if n.attrs.get("refindex_null_dataspace")]
    if not nulls:
        return
    taken = {posixpath.basename(p) for p in list(tree.arrays) + list(tree.groups)}
    for node in tree.arrays.values():
        if not node.attrs.get("refindex_null_dataspace"):
            taken.update(d for d in node.attrs.get("_ARRAY_DIMENSIONS") or () if isinstance(d, str))
    name, n = NULL_DIM, 0
    while name in taken:
        n += 1
        name = f"{NULL_DIM}_{n}"
    for node in nulls:
        node.attrs["_ARRAY_DIMENSIONS"] = [name]


def fixed_width_text(node: ArrayNode) -> None:
    """Variable-length text (inline chunks, ``vlen-utf8``) as ``<U<n>`` chunks, in place (see the module)."""
    size = int(np.prod(node.shape, dtype=np.int64))
    try:
        decoded = {key: _decode(data, node) for key, data in node.inline.items()}
    except Exception:  # noqa: BLE001 - not what refindex writes for text: leave it
        return
    width = max((len(s) for chunk in decoded.values() for s in chunk.ravel()), default=0)
    if 4 * max(width, 1) * size > MAX_FIXED_TEXT or any(
            isinstance(s, str) and s.endswith("\0") for chunk in decoded.values() for s in chunk.ravel()):
        return
    dt = np.asarray(["x" * max(width, 1)]).dtype  # numpy's width for the longest (xarray's astype(str))
    node.dtype, node.filters, node.compressor, node.fill_value = descr(dt), None, dict(TEXT_COMPRESSOR), None
    node.inline = {key: encode_chunk(chunk.astype(dt), None, node.compressor) for key, chunk in decoded.items()}


def _decode(data: bytes, node: ArrayNode) -> np.ndarray:
    out: object = data
    for codec in reversed(codec_pipeline(node.filters, node.compressor)):
        out = codec.decode(out)
    return np.asarray(out, dtype=object).reshape(node.chunks)


def netcdf_value(value: Any) -> Any:
    """An attribute value as netCDF readers hand it over: a one-element array is its element."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def rename_non_coordinates(tree: Tree) -> None:
    """``/g/_nc4_non_coord_x`` -> ``/g/x`` where no node is named so (netCDF-4's trick for a variable
    named like a dimension it does not index; netCDF readers show it under its own name)."""
    taken = set(tree.arrays) | set(tree.groups)
    for path in [p for p in tree.arrays if posixpath.basename(p).startswith(NON_COORD)]:
        parent, name = posixpath.split(path)
        new = posixpath.join(parent, name[len(NON_COORD):])
        if not name[len(NON_COORD):] or new in taken:
            continue
        node = tree.arrays.pop(path)
        node.path = new
        tree.arrays[new] = node
        taken.add(new)
        tree.provenance.setdefault(RENAMED, {})[new] = path
    if RENAMED in tree.provenance:
        tree.arrays = dict(sorted(tree.arrays.items(), key=lambda kv: _path_key(kv[0])))


def _path_key(path: str) -> tuple[str, ...]:
    return () if path == "/" else tuple(path[1:].split("/"))


def keep_aside(tree: Tree) -> None:
    """Move the attributes xarray must not show (see the module) into the provenance's ``hidden_attributes``."""
    aside: dict[str, dict[str, Any]] = {}
    for path, node in list(tree.groups.items()) + list(tree.arrays.items()):
        names = [n for n in node.attrs if n in READER_HIDDEN or n in NOTES or n.startswith("refindex_")]
        if names:
            aside[path] = {n: node.attrs.pop(n) for n in names}
    if aside:
        tree.provenance[ASIDE] = dict(sorted(aside.items(), key=lambda kv: _path_key(kv[0])))


def hidden_attributes(provenance: dict[str, Any], path: str) -> dict[str, Any]:
    """The attributes of node ``path`` (an index path, "/a/b") that a plain index keeps in its provenance."""
    return dict((provenance.get(ASIDE) or {}).get(path) or {})
