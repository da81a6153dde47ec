"""What hdmf's object mapper expects of text, cached specifications and attribute types, whatever
the HDF5 writer chose; shared by the v2 and v3 hdmf conventions.

hdmf reads an HDF5 file through ``HDF5IO``, which hands the object mapper a ``str`` for every
scalar string dataset (it decodes fixed-length ones as UTF-8) and unpacks a cached
specification stored as a one-element array.  hdmf-zarr hands over what zarr returns:
``np.bytes_`` from a fixed-length (``|S``) array, which constructors refuse where text is
meant, and its v3 spec reader turns a one-element array into the text of a list.  Writers
other than pynwb store exactly these forms (AqNWB: fixed-length strings for the file's
text fields and its cached specifications; MIES: one-element arrays), so here:

* a scalar fixed-length string becomes variable-length UTF-8 text (what hdmf-zarr writes
  for text), and so does a cached specification of one element, made 0-d;
* fixed-length string *arrays* stay ``|S``: ``HDF5IO`` hands those over as bytes too;
* a value that is not UTF-8 is left as it is (``HDF5IO`` cannot decode it either).

The HDF5 type decides; the cached spec is not needed for any of these.  The scanner copies
such datasets into the index (they are one string each), so their values are at hand.

Attribute types JSON loses (``uint64``, ``float32``, arrays) are in each node's
``attr_types``; :func:`record_attribute_types` lists them in the index's provenance,
``{"attribute_types": {"/path": {"name": "<u8"}}}``, where hdmf-zarr and plain zarr users
do not see them and :func:`refindex.open_nwb` restores them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import codecs
from ..model import ArrayNode, Tree

VLEN_TEXT = {"id": "vlen-utf8"}
INLINE_COMPRESSOR = {"id": "zlib", "level": 1}


def decoded_chunk(node: ArrayNode, data: bytes) -> Any:
    """One stored chunk of ``node`` through its codecs, last to first (numcodecs loads here)."""
    buf: Any = data
    for codec in reversed(codecs.codec_pipeline(node.filters, node.compressor)):
        buf = codec.decode(buf)
    return buf


def present_text(tree: Tree, specloc: str | None) -> None:
    """Scalar fixed-length text as UTF-8 text, one-element cached specifications as scalars (in place)."""
    prefix = "/" + specloc.strip("/") + "/" if specloc else None
    for path, node in tree.arrays.items():
        spec = prefix is not None and path.startswith(prefix) and node.shape == (1,)
        if node.kind != "str" or not (spec or (node.scalar and node.shape == ())):
            continue
        text = _one_text(node)
        if text is not None:
            _as_scalar_text(node, text)


def _one_text(node: ArrayNode) -> str | None:
    """The one string ``node`` holds, from its inline chunk, or None (not inline, not UTF-8)."""
    if node.refs is not None and len(node.refs):
        return None
    data = node.inline.get("0")
    if data is None:
        return None
    if node.dtype == "|O":
        if not node.filters or node.filters[0].get("id") != "vlen-utf8":
            return None
        value = np.asarray(decoded_chunk(node, data), dtype=object).reshape(-1)[0]
        return value if isinstance(value, str) else None
    if not isinstance(node.dtype, str) or not node.dtype.startswith("|S") or node.filters:
        return None
    raw = np.frombuffer(bytes(decoded_chunk(node, data)), dtype=node.dtype).reshape(-1)[0]
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _as_scalar_text(node: ArrayNode, text: str) -> None:
    node.shape, node.chunks, node.scalar = (), (), True
    node.dtype, node.fill_value, node.kind = "|O", None, "str"
    node.filters, node.compressor = [dict(VLEN_TEXT)], dict(INLINE_COMPRESSOR)
    node.refs = None
    node.inline = {"0": codecs.encode_chunk(np.array(text, dtype=object), node.filters, node.compressor)}
    if "_ARRAY_DIMENSIONS" in node.attrs:
        node.attrs["_ARRAY_DIMENSIONS"] = []  # as every scalar has
    node.dimension_names = None


def record_attribute_types(tree: Tree) -> None:
    """``tree.provenance["attribute_types"]``: ``{path: {attribute: numpy dtype text}}`` (when any)."""
    found = {path: dict(sorted(node.attr_types.items()))
             for path, node in [*tree.groups.items(), *tree.arrays.items()] if node.attr_types}
    if found:
        tree.provenance["attribute_types"] = dict(sorted(found.items()))
