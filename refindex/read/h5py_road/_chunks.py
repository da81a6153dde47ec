"""Which chunk of which array a read of the file is, from the index's chunk tables.

libhdf5 reads a dataset's chunks one at a time, each a round trip away when the file is
remote; the index knows where every chunk lies, in the order libhdf5 visits them (the
chunk grid in C order, the order of its chunk index).  :class:`ChunkMap` finds the array
and the chunk a read is (the pages' ``extents`` say which arrays' chunks span the offset;
an array's table is loaded from the index the first time one of its chunks is read), so
the file object can fetch the chunks that follow before libhdf5 asks for them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ... import urls
from ...model import V2_KEYS, V3_KEYS, key_of

# path -> (offsets, sizes) of the array's chunks in the scanned file, in C order of its grid (None: unknown),
# and, where the index tells it, a Grid: which chunks a selection needs (see ._selection)
TableLoader = Callable[[str], "tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, Grid] | None"]


@dataclass
class Grid:
    """An array's shape, its chunks' shape, and each stored chunk's place in the grid (C order)."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    places: np.ndarray  # ascending, one per stored chunk (a chunk never written has none)
    encoded: bool = False  # compressed or filtered: libhdf5 decodes each chunk (slower than a copy)

    def runs_of(self, places: np.ndarray) -> np.ndarray:
        """The places in the run (sorted) of the stored chunks among grid ``places`` (sorted)."""
        at = np.searchsorted(self.places, places)
        inside = at < len(self.places)
        at = at[inside]
        return at[self.places[at] == places[inside]]


@dataclass
class ChunkRun:
    """One array's chunks in the file, in the order libhdf5 reads them."""

    path: str
    offsets: np.ndarray
    sizes: np.ndarray
    ordinal: dict[int, int] = field(default_factory=dict)  # chunk offset -> its place in the run
    grid: Grid | None = None

    @classmethod
    def of(cls, path: str, offsets: np.ndarray, sizes: np.ndarray, grid: Grid | None = None) -> "ChunkRun":
        if grid is not None and len(grid.places) != len(offsets):
            grid = None
        return cls(path, offsets, sizes, {o: i for i, o in enumerate(offsets.tolist())}, grid)


class ChunkMap:
    """Find the chunk a read of ``[start, end)`` is (see the module docstring)."""

    def __init__(self, extents: dict[str, tuple[int, int]], load: TableLoader | None):
        self.extents = sorted((lo, hi, path) for path, (lo, hi) in extents.items())
        self.load = load
        self.runs: dict[str, ChunkRun | None] = {}

    def find(self, start: int, end: int) -> tuple[ChunkRun, int] | None:
        """(the run, the chunk's place in it) when ``[start, end)`` is one stored chunk, else None."""
        if self.load is None:
            return None
        for lo, hi, path in self.extents:
            if lo > start:
                break
            if start >= hi:
                continue
            run = self.run(path)
            k = run.ordinal.get(start) if run is not None else None
            if k is not None and int(run.sizes[k]) >= end - start:
                return run, k
        return None

    def run(self, path: str) -> ChunkRun | None:
        if path not in self.runs:
            table = None
            try:
                table = self.load(path) if self.load is not None else None
            except Exception:  # noqa: BLE001 - a table that cannot be read only means no read-ahead
                table = None
            self.runs[path] = None if table is None or not len(table[0]) else ChunkRun.of(path, *table)
        return self.runs[path]


def grid_coords(shape: list[int], chunks: list[int]) -> np.ndarray:
    """Every grid position of an array, in C order, as an (n, ndim) int64 array."""
    grid = [max(1, math.ceil(s / c)) if c else 1 for s, c in zip(shape, chunks)]
    if not grid:
        return np.zeros((1, 0), np.int64)
    return np.indices(grid, dtype=np.int64).reshape(len(grid), -1).T


def json_loader(refs: dict[str, Any], own_url: str) -> TableLoader:
    """Chunk tables from a JSON index (zarr v2 or v3 keys), for the chunks in ``own_url``."""
    body = refs.get("refs") if "version" in refs else refs
    names = {"{{" + k + "}}" for k, v in (refs.get("templates") or {}).items() if v == own_url} | {own_url}
    v3 = "zarr.json" in body

    def load(path: str) -> tuple[np.ndarray, np.ndarray] | None:
        prefix = key_of(path) + "/" if key_of(path) else ""
        doc = json.loads(body.get(prefix + ("zarr.json" if v3 else ".zarray")) or "null")
        if not isinstance(doc, dict):
            return None
        chunks = doc["chunk_grid"]["configuration"]["chunk_shape"] if v3 else doc["chunks"]
        keys = (V3_KEYS if v3 else V2_KEYS).keys(grid_coords(doc["shape"], chunks))
        offsets, sizes, places = [], [], []
        for place, key in enumerate(keys):
            v = body.get(prefix + key)
            if type(v) is list and len(v) == 3 and v[0] in names:
                offsets.append(v[1])
                sizes.append(v[2])
                places.append(place)
        grid = Grid(tuple(doc["shape"]), tuple(chunks), np.asarray(places, np.int64), encoded(doc))
        return np.asarray(offsets, np.int64), np.asarray(sizes, np.int64), grid

    return load


def parquet_loader(folder: str, storage_options: dict[str, Any] | None, own_url: str) -> TableLoader:
    """Chunk tables from a parquet index (fsspec's layout: records in C order of the grid)."""

    def load(path: str) -> tuple[np.ndarray, np.ndarray] | None:
        import pyarrow.parquet as pq

        fs, root = urls.filesystem(folder, storage_options)
        base = root.rstrip("/") + "/" + key_of(path)
        files = sorted(fs.glob(base + "/refs.*.parq"), key=lambda p: int(p.rsplit(".", 2)[-2]))
        offsets, sizes, places = [], [], []
        place = 0
        for name in files:
            with fs.open(name, "rb") as fh:
                table = pq.read_table(fh, columns=["path", "offset", "size"]).to_pydict()
            for p, o, n in zip(table["path"], table["offset"], table["size"]):
                if p is not None and p in (own_url, "{{u}}"):
                    offsets.append(o)
                    sizes.append(n)
                    places.append(place)
                place += 1
        table = np.asarray(offsets, np.int64), np.asarray(sizes, np.int64)
        grid = _parquet_grid(fs, root.rstrip("/"), key_of(path), places)
        return table if grid is None else (*table, grid)

    return load


def _parquet_grid(fs: Any, root: str, key: str, places: list[int]) -> Grid | None:
    """The array's grid from the index's consolidated metadata (its records are in C order of the
    grid, a record per place), or None when it cannot be read."""
    try:
        with fs.open(root + "/.zmetadata", "rb") as fh:
            doc = json.loads(fh.read())["metadata"][(key + "/" if key else "") + ".zarray"]
        doc = json.loads(doc) if isinstance(doc, str) else doc
        return Grid(tuple(doc["shape"]), tuple(doc["chunks"]), np.asarray(places, np.int64), encoded(doc))
    except Exception:  # noqa: BLE001 - no grid only means no selection-driven read-ahead
        return None


def encoded(doc: dict[str, Any]) -> bool:
    """Are an array's chunks compressed or filtered (zarr v2 ``.zarray`` or v3 ``zarr.json``)?"""
    if "codecs" in doc:
        return any(c.get("name") not in ("bytes", "transpose") for c in doc["codecs"] if isinstance(c, dict))
    return bool(doc.get("compressor") or doc.get("filters"))
