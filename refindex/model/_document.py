"""The index document's own layout: how it names nodes and chunks, what it is made of."""

from __future__ import annotations

import json
from typing import Any, NamedTuple, TypedDict

import numpy as np

ZMETADATA = ".zmetadata"  # a parquet index's metadata (fsspec's layout): readers find one by it


def key_of(path: str) -> str:
    """Zarr key prefix of an HDF5 path: "/a/b" -> "a/b", "/" -> ""."""
    return path.strip("/")


class KeyEncoding(NamedTuple):
    """How an index names a chunk by its grid position (a named tuple: immutable, and made faster
    than a frozen dataclass when a reader imports it).

    The model keeps inline chunks under v2 keys (:func:`chunk_key`: ``"i.j"``, ``"0"`` for a
    0-d array); an index writes them in its own encoding: zarr v2's (:data:`V2_KEYS`) or
    zarr v3's default one with ``/`` (:data:`V3_KEYS`: ``"c/i/j"``, ``"c"`` for a 0-d array).
    """

    lead: str  # before the first index
    sep: str  # between indices
    scalar: str  # the one chunk of a 0-d array

    def key(self, coords) -> str:
        return self.lead + self.sep.join(str(int(c)) for c in coords) if len(coords) else self.scalar

    def keys(self, coords: np.ndarray) -> list[str]:
        """:meth:`key` of every row of an (n, ndim) coordinate array, built column-wise."""
        n, ndim = coords.shape
        if ndim == 0:
            return [self.scalar] * n
        cols = [coords[:, i].tolist() for i in range(ndim)]
        return list(map((self.lead + self.sep.join(["{}"] * ndim)).format, *cols))

    def of_model_key(self, key: str, ndim: int) -> str:
        """A model (v2) chunk key of an ``ndim``-dimensional array in this encoding."""
        if ndim == 0:
            return self.scalar
        return self.lead + key.replace(".", self.sep) if self.sep != "." or self.lead else key


V2_KEYS = KeyEncoding("", ".", "0")
V3_KEYS = KeyEncoding("c/", "/", "c")


class RefsDocument(TypedDict, total=False):
    """A ReferenceFileSystem (version 1) as refindex writes it."""

    version: int
    templates: dict[str, str]  # short names of the files chunks live in: "u" is the scanned file
    refs: dict[str, Any]  # key -> metadata JSON text, inline "base64:..." text, or [url, offset, size]
    refindex: dict[str, Any]  # provenance: version, source, convention, options, skipped, omitted, external


def external_sources(refs: RefsDocument) -> list[str]:
    """The other files (``source`` values other than ".") that an index's links and attribute references name
    (``zarr_link``/``_LINKS`` entries, ``_REFERENCE`` attributes; zarr v2 or v3 documents)."""
    found: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            src = v.get("source")
            if isinstance(src, str) and src != "." and "path" in v:
                found.add(src)
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk((refs.get("refindex") or {}).get("hidden_attributes"))  # a plain index's zarr_link entries
    for key, value in (refs.get("refs") or {}).items():
        name = key.rsplit("/", 1)[-1]
        if name == ".zattrs" and isinstance(value, str):
            walk(json.loads(value))
        elif name == "zarr.json" and isinstance(value, str):  # zarr v3: a node's attributes
            walk(json.loads(value).get("attributes"))
    return sorted(found)
