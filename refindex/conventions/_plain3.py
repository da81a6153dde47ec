"""The ``plain`` convention for zarr v3 indexes: v2's view of the file, and xarray's v3 encodings.

Links, names, dimensions and attributes are as in v2 (:func:`plain_view`), and refindex's
notes go to the provenance alike.  The array's ``fill_value`` stays HDF5's (xarray does not
read it in v3), so unwritten chunks read as libhdf5 reads them.  What changes is how xarray,
the main reader of such files, finds two netCDF facts in a v3 array:

* dimension names: in the array's ``dimension_names``; xarray then shows an
  ``_ARRAY_DIMENSIONS`` attribute as a user attribute, so it moves there from the attributes;
* ``_FillValue``: xarray (``zarr_format=3``) decodes this attribute in its own encoding
  (floats as base64 of a little-endian double, complex numbers as two, integers and
  booleans as JSON numbers, text as text).  netCDF stores it as a one-element array (a JSON
  list in the index), which xarray refuses, failing the whole file.  It is rewritten in
  that encoding (exact: a float32 fill widens to a double losslessly).  A fill xarray cannot
  decode in v3 (fixed-length bytes, compounds, opaque: xarray 2026.9's v3 reader refuses the
  whole file) goes to the provenance's ``hidden_attributes`` unchanged: the file opens, and
  such a variable is not masked by xarray (it is by h5netcdf; see docs/xarray.md).
"""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

from ..codecs import dtype_of
from ..model import ArrayNode, Tree
from ._ncview import keep_aside
from ._plain import plain_view

KEPT_FILL_ATTR = "refindex__FillValue"  # the name a fill xarray cannot decode is kept aside under
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def apply_plain3(tree: Tree) -> list[tuple[str, str]]:
    """Rewrite ``tree`` in place for a plain v3 index; nothing is refused here."""
    plain_view(tree)
    for node in tree.arrays.values():
        dims = node.attrs.pop("_ARRAY_DIMENSIONS", None)
        if isinstance(dims, list) and len(dims) == len(node.shape) and all(isinstance(d, str) for d in dims):
            node.dimension_names = list(dims)
        if "_FillValue" in node.attrs:
            xarray_fill_attr(node)
    keep_aside(tree)
    return []


def _double_b64(v: Any) -> str:
    x = _SPECIAL[v] if isinstance(v, str) else float(v)
    return base64.standard_b64encode(struct.pack("<d", x)).decode("ascii")


def xarray_fill_attr(node: ArrayNode) -> None:
    """Rewrite ``_FillValue`` in xarray's v3 encoding (or keep it aside when xarray cannot decode it)."""
    value = node.attrs["_FillValue"]
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    try:
        kind = "T" if node.dtype == "|O" else dtype_of(node.dtype).kind
    except (ValueError, TypeError):
        kind = "?"
    try:
        if kind == "f" and isinstance(value, (int, float, str)) and not isinstance(value, bool):
            encoded: Any = _double_b64(value)
        elif kind == "c" and isinstance(value, list) and len(value) == 2:
            encoded = [_double_b64(value[0]), _double_b64(value[1])]
        elif kind in "iu" and isinstance(value, (int, float)) and float(value).is_integer():
            encoded = int(value)
        elif kind == "b" and isinstance(value, (bool, int)):
            encoded = bool(value)
        elif kind in "UT" and isinstance(value, str):
            encoded = value
        else:
            raise ValueError(kind)
    except (ValueError, KeyError, TypeError):
        node.attrs[KEPT_FILL_ATTR] = node.attrs.pop("_FillValue")
        return
    node.attrs["_FillValue"] = encoded
