"""The neutral node model the scanner produces and the writers consume.

It says what the index must contain (zarr v2 metadata, chunk references, inline
bytes, links) without any knowledge of HDF5 APIs or JSON layout.  Chunk references
are held as numpy arrays so a dataset with millions of chunks costs a few arrays,
not millions of Python objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class ChunkTable:
    """Byte ranges of stored chunks of one array.

    ``coords`` is an ``(n, ndim)`` int64 array of chunk-grid indices, ``offsets`` and
    ``sizes`` are uint64 byte ranges in ``url`` (``None`` means the scanned file).
    """

    coords: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    url: str | None = None

    def __len__(self) -> int:
        return int(self.offsets.shape[0])

    @classmethod
    def empty(cls, ndim: int) -> "ChunkTable":
        return cls(
            np.zeros((0, ndim), dtype=np.int64),
            np.zeros(0, dtype=np.uint64),
            np.zeros(0, dtype=np.uint64),
        )

    def take(self, mask: np.ndarray) -> "ChunkTable":
        return ChunkTable(self.coords[mask], self.offsets[mask], self.sizes[mask], self.url)

    @property
    def nbytes_referenced(self) -> int:
        return int(self.sizes.sum()) if len(self) else 0


@dataclass
class ArrayNode:
    """A zarr v2 array: metadata plus where each chunk's bytes live."""

    path: str  # HDF5 path, "/a/b"
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: Any  # zarr v2 dtype: a string such as "<i4" or a list of fields
    fill_value: Any  # already JSON-encoded the way zarr v2 expects
    compressor: dict | None = None
    filters: list[dict] | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    refs: ChunkTable | None = None  # chunks read from a file
    inline: dict[str, bytes] = field(default_factory=dict)  # chunk key -> encoded bytes
    # What the data is, for conventions (e.g. "int16", "str", "object", "region", or a
    # list of {"name", "dtype"} for compounds).
    kind: Any = None
    scalar: bool = False  # HDF5 scalar dataspace (shape ())
    object_id: str | None = None


@dataclass
class LinkNode:
    """A name that points at another object instead of holding one."""

    name: str  # link name inside its parent group
    parent: str  # HDF5 path of the parent group
    kind: str  # "soft", "hard", "external" or "user-defined"
    target: str | None  # path of the target inside its file
    file: str | None = None  # external file as written in the link
    target_object_id: str | None = None
    resolved: bool = True  # False: dangling or unreachable
    target_root_object_id: str | None = None  # external links: object_id of the other file's root


@dataclass
class GroupNode:
    path: str
    attrs: dict[str, Any] = field(default_factory=dict)
    object_id: str | None = None


@dataclass
class Tree:
    """Everything found in one file, keyed by HDF5 path."""

    url: str
    groups: dict[str, GroupNode] = field(default_factory=dict)
    arrays: dict[str, ArrayNode] = field(default_factory=dict)
    links: list[LinkNode] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # {"path", "reason"}
    root_object_id: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)


def join(parent: str, name: str) -> str:
    return ("" if parent == "/" else parent) + "/" + name


def key_of(path: str) -> str:
    """Zarr key prefix of an HDF5 path: "/a/b" -> "a/b", "/" -> ""."""
    return path.strip("/")
