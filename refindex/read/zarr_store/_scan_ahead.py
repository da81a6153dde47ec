"""Where a sequential scan of an array goes next, from the index's chunk grid.

A reader that walks an array in steps (``for i in range(0, n, step): a[i:i + step]``, or dask
tasks of consecutive blocks) asks for one step's chunks at a time, a round trip each.  When
two selections in a row each take a run of chunks in the array's C order, the second right
after the first, the next one most likely takes as many chunks after them: :class:`ScanAhead`
names those keys, and :class:`~refindex.read.IndexStore` fetches them beside the current ones,
as the h5py road reads ahead along libhdf5's reads.  Where the scan ends, at most one step's
chunks were fetched and not read; a single selection never triggers it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Grid:
    """An array's chunk grid and how its chunk keys are spelled."""

    shape: tuple[int, ...]
    prefix: str  # "path/" (v2) or "path/c/" (v3)
    sep: str

    def key(self, ordinal: int) -> str:
        idx = []
        for n in reversed(self.shape):
            ordinal, i = divmod(ordinal, n)
            idx.append(str(i))
        return self.prefix + self.sep.join(reversed(idx))

    def ordinal(self, rest: str) -> int | None:
        parts = rest.split(self.sep)
        if len(parts) != len(self.shape) or not all(p.isdigit() for p in parts):
            return None
        out = 0
        for p, n in zip(parts, self.shape):
            i = int(p)
            if i >= n:
                return None
            out = out * n + i
        return out


def grid_of(path: str, metadata: Callable[[str], bytes | None]) -> Grid | None:
    """The chunk grid of the array at ``path`` from its inline metadata (None: not an array, or keys
    spelled otherwise than zarr's defaults)."""
    base = path + "/" if path else ""
    doc = metadata(base + ".zarray")
    try:
        if doc is not None:
            meta = json.loads(doc)
            shape, chunks = meta["shape"], meta["chunks"]
            prefix, sep = base, meta.get("dimension_separator") or "."
        elif (doc := metadata(base + "zarr.json")) is not None:
            meta = json.loads(doc)
            encoding = meta.get("chunk_key_encoding") or {}
            if meta.get("node_type") != "array" or encoding.get("name", "default") != "default":
                return None
            shape, chunks = meta["shape"], meta["chunk_grid"]["configuration"]["chunk_shape"]
            prefix, sep = base + "c/", (encoding.get("configuration") or {}).get("separator", "/")
        else:
            return None
    except (ValueError, KeyError, TypeError):
        return None
    if not shape or len(shape) != len(chunks) or not all(chunks):
        return None
    return Grid(tuple(max(1, math.ceil(s / c)) for s, c in zip(shape, chunks)), prefix, sep)


class ScanAhead:
    """The keys a sequential scan asks for next (see the module docstring)."""

    def __init__(self, metadata: Callable[[str], bytes | None]):
        self._metadata = metadata
        self._grids: dict[str, Grid | None] = {}
        self._last: dict[str, tuple[int, int]] = {}  # array path -> its last selection's run of ordinals

    def _locate(self, key: str) -> tuple[str, int] | None:
        for path in _array_paths(key):
            if path not in self._grids:
                self._grids[path] = grid_of(path, self._metadata)
            grid = self._grids[path]
            if grid is not None and key.startswith(grid.prefix):
                ordinal = grid.ordinal(key[len(grid.prefix):])
                if ordinal is not None:
                    return path, ordinal
        return None

    def after(self, keys: Iterable[str]) -> list[str]:
        """The keys the next step of a scan will ask for, given the keys this selection asked for
        (none unless the selection continues the array's previous one)."""
        runs: dict[str, set[int]] = {}
        for key in keys:
            found = self._locate(key)
            if found is not None:
                runs.setdefault(found[0], set()).add(found[1])
        out: list[str] = []
        for path, ordinals in runs.items():
            lo, hi = min(ordinals), max(ordinals)
            before = self._last.pop(path, None)
            if hi - lo + 1 != len(ordinals):
                continue  # not one run: no guess
            self._last[path] = (lo, hi)
            if before is not None and before[1] + 1 == lo:
                grid = self._grids[path]
                total = math.prod(grid.shape)
                out += [grid.key(o) for o in range(hi + 1, min(total, hi + 1 + len(ordinals)))]
        return out


def _array_paths(key: str) -> list[str]:
    """The paths an array whose chunk ``key`` this is may have: v2 ``path/i.j``, v3 ``path/c/i/j``."""
    head, _, _ = key.rpartition("/")
    out = [head]
    if "/c/" in "/" + key:
        out.append(("/" + key).split("/c/", 1)[0].lstrip("/"))
    while head:  # v2 with "/" separators: the path is a prefix
        head = head.rpartition("/")[0]
        out.append(head)
    return list(dict.fromkeys(out))
