"""The neutral model between the scanner and the writers, and the layout of an index document.

- ``_tree``: what the scanner finds in one file (:class:`Tree` of groups, arrays with numpy
  chunk tables, links), without any knowledge of HDF5 APIs or JSON layout;
- ``_pages``: the bytes of the file an index carries for libhdf5 (:class:`Pages`);
- ``_document``: how an index names nodes and chunks (:func:`key_of`, :class:`KeyEncoding`)
  and what it is made of (:class:`RefsDocument`).

Loaded on first use: a reader opening an index needs the last two only, and the tree's
dataclasses cost an open several milliseconds to make.
"""

from ..lazy import attribute_loader

_WHERE = {
    "ArrayNode": "_tree", "ChunkTable": "_tree", "GroupNode": "_tree", "LinkNode": "_tree", "NcMember": "_tree",
    "Tree": "_tree", "chunk_key": "_tree", "chunk_keys": "_tree", "inline_rows": "_tree", "is_hdmf_root": "_tree",
    "join": "_tree",
    "Pages": "_pages",
    "KeyEncoding": "_document", "RefsDocument": "_document", "V2_KEYS": "_document", "V3_KEYS": "_document",
    "ZMETADATA": "_document", "external_sources": "_document", "key_of": "_document",
}

__all__ = sorted(_WHERE)

__getattr__ = attribute_loader(__name__, _WHERE)
