"""The hdmf convention (hdmf-zarr's v2 storage spec, read by ``hdmf_zarr.NWBZarrV2IO``).

Links as ``zarr_link`` entries on the parent group (further names of hard-linked datasets:
arrays of their own, :func:`~._links.hard_linked_arrays`), every dataset has ``zarr_dtype``,
scalars stay 0-d, ``.specloc`` is a path string; text, cached specifications and attribute
types as :mod:`._hdmftext` says.

What hdmf-zarr does not read is written as xarray reads it over the file with h5netcdf, as the
plain convention writes it: dimension names (``_ARRAY_DIMENSIONS``, :mod:`._ncdims`) and fill
values (:mod:`._fills`: HDF5's fill value as ``fill_value`` made xarray mask every element equal
to it, the zeros of an integer column among them).
"""

from __future__ import annotations

from typing import Any

from ..model import Tree, join
from ._fills import xarray_fill_values
from ._hdmftext import present_text, record_attribute_types
from ._links import add_zarr_link, hard_linked_arrays
from ._ncdims import name_dimensions


def _zarr_dtype(kind: Any) -> Any:
    if isinstance(kind, list):
        return [{"name": f["name"], "dtype": _zarr_dtype(f["dtype"])} for f in kind]
    if kind in ("str", "object", "region"):
        return kind
    if kind == "bytes":
        return "bytes"
    return str(kind)


def apply_hdmf(tree: Tree) -> None:
    hard_linked_arrays(tree)
    name_dimensions(tree)
    for link in sorted(tree.links, key=lambda l: join(l.parent, l.name)):
        if link.parent in tree.groups:
            add_zarr_link(tree, link)
    root = tree.groups["/"]
    spec = root.attrs.get(".specloc")
    if isinstance(spec, dict) and isinstance(spec.get("value"), dict):
        path = spec["value"].get("path") or ""
        root.attrs[".specloc"] = path.lstrip("/")
    specloc = root.attrs.get(".specloc")
    present_text(tree, specloc if isinstance(specloc, str) else None)
    record_attribute_types(tree)
    for node in tree.arrays.values():
        # Scalars stay 0-d with their real zarr_dtype: hdmf-zarr 0.14 reads both this and
        # the older shape-(1,) "scalar" form, but only 0-d keeps "object" for scalar
        # references and reads cached specs without falling back to raw chunk reads.
        node.attrs["zarr_dtype"] = _zarr_dtype(node.kind)
    xarray_fill_values(tree)
