"""The combine's state while files arrive, and the one dataset it makes of them at the end.

Files arrive in any order (as workers finish).  Each file's digest is checked against the
first file's (:mod:`._combine_checks`) and reduced to numpy columns: per array, the chunks'
file number, grid position, URL number, offset and size, inline bytes in one buffer; per
file, its position, its number of steps and its steps on the shared time scale.  Only the
earliest file's digest is kept whole (its attributes win, as with xarray's
``combine_attrs="override"``; its coordinates stand for all).  Memory grows by a few numbers
per chunk and per step, never by Python objects per chunk.

At the end the files are ordered (by their first step, or by input position for ``nested``),
steps are checked to increase strictly across files, each file's chunks are moved to its
place along the concat dimension, and data variables without that dimension are
broadcast along it (xarray's default ``data_vars="all"``: each step refers to its file's
chunks).  Chunks can only be moved whole: every file but the last must hold a whole number
of chunks along the dimension.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import RefindexError
from ._combine_checks import check_array, check_names, length_along, missing_steps, refuse
from ._combine_digest import FileDigest, coordinate_names
from ._combine_layout import OutLayout, layout
from ._combine_times import Encoding, as_dates, decode_steps, encoding_of


class Column:
    """An append-only numpy column (rows of ``width`` values) that doubles its buffer when full."""

    def __init__(self, dtype: Any, width: int | None = None):
        self.width, self.n = width, 0
        self.buf = np.zeros((16,) if width is None else (16, width), dtype=dtype)

    def append(self, values: np.ndarray) -> None:
        m = len(values)
        if self.n + m > len(self.buf):
            bigger = np.zeros((max(2 * len(self.buf), self.n + m), *self.buf.shape[1:]), dtype=self.buf.dtype)
            bigger[:self.n] = self.buf[:self.n]
            self.buf = bigger
        self.buf[self.n:self.n + m] = values
        self.n += m

    @property
    def values(self) -> np.ndarray:
        return self.buf[:self.n]


@dataclass
class Rows:
    """The chunks of one array over every file so far (``file``: the file's arrival number)."""

    ndim: int
    file: Column = field(init=False)
    coords: Column = field(init=False)
    url: Column = field(init=False)
    offset: Column = field(init=False)
    size: Column = field(init=False)

    def __post_init__(self) -> None:
        self.file, self.url = Column(np.int32), Column(np.int32)
        self.coords = Column(np.int64, max(self.ndim, 1))
        self.offset, self.size = Column(np.int64), Column(np.int64)


class Combination:
    """Digests in, one dataset out; see the module docstring."""

    def __init__(self, dim: str, mode: str = "by_coords"):
        if mode not in ("by_coords", "nested"):
            raise RefindexError(f"unknown combine mode {mode!r} (by_coords or nested)")
        self.dim, self.mode = dim, mode
        self.ref: FileDigest | None = None  # the first file to arrive: what the others are checked against
        self.first: tuple[Any, FileDigest] | None = None  # the earliest file so far (its order key, digest)
        self.enc: Encoding | None = None
        self.uniform = True  # every file stores its steps the same way: their numbers can be kept
        self.sources: list[str] = []
        self.position, self.length = Column(np.int64), Column(np.int64)
        self.step_start = Column(np.int64)
        self.steps: Column | None = None
        self.raw: Column | None = None
        self.rows: dict[str, Rows] = {}
        self.kind: dict[str, str] = {}
        self.url_ids: dict[str, int] = {}
        self.inline = bytearray()

    def add(self, d: FileDigest, position: int) -> None:
        """Take one file's digest (refused with a RefindexError naming the files and the difference)."""
        n = length_along(d, self.dim)
        if self.ref is None:
            self.ref = d
            self.rows = {name: Rows(len(za["shape"])) for name, za in d.zarrays.items()}
        check_names(self.ref, d)
        for name in sorted(d.zarrays):
            check_array(self.ref, d, name, self.dim)
        key = self.take_steps(d, n, position)
        if not self.kind:
            self.kind = self.kinds()
        number = len(self.sources)
        self.sources.append(d.source)
        self.position.append(np.array([position]))
        self.length.append(np.array([n]))
        remap = np.array([self.url_ids.setdefault(d.source if u == d.source else u, len(self.url_ids))  # (held already)
                          for u in d.urls] + [-1], dtype=np.int32)
        for name, cols in d.chunks.items():
            if self.kind[name] in ("once", "coordinate"):
                continue  # the earliest file's are written (once), or values encoded anew (coordinate)
            r = self.rows[name]
            r.file.append(np.full(len(cols.url), number, dtype=np.int32))
            r.coords.append(cols.coords if r.ndim else np.zeros((len(cols.url), 1), dtype=np.int64))
            r.url.append(remap[cols.url])
            r.offset.append(self.keep_inline(d, cols.url, cols.offset, cols.size))
            r.size.append(cols.size)
        if self.first is None or key < self.first[0]:
            self.first = (key, d)

    def keep_inline(self, d: FileDigest, url: np.ndarray, offset: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Offsets with the inline rows' bytes copied into the combine's buffer (only the rows kept)."""
        out = offset.copy()
        for i in np.flatnonzero(url == -1).tolist():
            out[i] = len(self.inline)
            self.inline += d.inline[int(offset[i]):int(offset[i] + size[i])]
        return out

    def take_steps(self, d: FileDigest, n: int, position: int) -> Any:
        """Decode the file's steps; returns its order key (first step, or input position)."""
        assert self.ref is not None
        if self.dim not in d.values:
            if self.mode == "by_coords":
                raise RefindexError(f"no coordinate variable {self.dim!r} to order the files by: "
                                    f"combine them in input order (mode 'nested')", file=d.source)
            return (position,)
        raw = d.values[self.dim].reshape(-1)
        if missing_steps(d, self.dim, raw):
            raise RefindexError(f"{self.dim!r} has missing steps (values equal to its fill value)", file=d.source)
        if d.decoded is None:  # (a digest from the combine's saved state holds them decoded)
            d.decoded = decode_steps(raw, encoding_of(d.zattrs[self.dim], d.zarrays[self.dim]["dtype"]), d.source,
                                     self.dim)
        steps, enc = d.decoded
        if self.enc is None:
            self.enc = enc
            self.steps, self.raw = Column(steps.dtype), Column(raw.dtype)
        elif enc.kind == "raw" and enc != self.enc:
            raise refuse(self.ref, d, f"{self.dim!r} is stored as {self.enc.dtype} in {self.enc.units!r} vs "
                                      f"{enc.dtype} in {enc.units!r}: not times, so not re-encoded")
        elif enc.kind != self.enc.kind or (enc.kind == "cftime" and enc.calendar != self.enc.calendar):
            raise refuse(self.ref, d, f"{self.dim!r} decodes to {self.enc.kind} ({self.enc.calendar}) vs "
                                      f"{enc.kind} ({enc.calendar}): one coordinate cannot hold both")
        if len(steps) > 1 and not np.all(steps[1:] > steps[:-1]):
            raise RefindexError(f"{self.dim!r} does not increase strictly within the file", file=d.source)
        self.uniform = self.uniform and enc == self.enc
        assert self.steps is not None and self.raw is not None
        self.step_start.append(np.array([self.steps.n]))
        self.steps.append(steps)
        if self.uniform:
            self.raw.append(raw.astype(self.raw.buf.dtype))
        return (steps[0], position) if self.mode == "by_coords" else (position,)

    # ------------------------------------------------------------------ the end
    def order(self) -> np.ndarray:
        """Arrival numbers of the files in combined order; steps checked to increase across files."""
        positions = self.position.values
        if self.steps is None:
            return np.argsort(positions, kind="stable")
        first = self.steps.values[self.step_start.values]
        order = np.lexsort((positions, first)) if self.mode == "by_coords" else np.argsort(positions, kind="stable")
        lengths, starts = self.length.values, self.step_start.values
        if self.mode == "nested":
            self.no_duplicates()
            return order
        last = self.steps.values[starts + lengths - 1]
        for a, b in zip(order[:-1].tolist(), order[1:].tolist()):
            if first[b] <= last[a]:
                what = "duplicate" if first[b] == last[a] else "overlapping"
                raise RefindexError(f"cannot combine {self.sources[a]} and {self.sources[b]}: {what} steps along "
                                    f"{self.dim!r} ({self.show(last[a])} in the first, {self.show(first[b])} in "
                                    "the second)")
        return order

    def no_duplicates(self) -> None:
        """In input order steps may go back and forth (as xarray's nested combine keeps them), never repeat."""
        assert self.steps is not None
        steps = self.steps.values
        order = np.argsort(steps, kind="stable")
        same = np.flatnonzero(steps[order][1:] == steps[order][:-1])
        if len(same):
            i, j = order[same[0]], order[same[0] + 1]
            file_of = np.searchsorted(self.step_start.values, [i, j], side="right") - 1
            a, b = (self.sources[int(f)] for f in file_of)
            raise RefindexError(f"cannot combine {a} and {b}: duplicate steps along {self.dim!r} "
                                f"({self.show(steps[i])})")

    def show(self, step: Any) -> str:
        assert self.enc is not None
        if self.enc.kind == "datetime64":
            return str(np.datetime64(int(step), "ns").astype("M8[s]"))
        return str(step) if self.enc.kind == "raw" else str(as_dates(np.array([step]), self.enc)[0])

    def finish(self) -> OutLayout:
        if self.ref is None or self.first is None:
            raise RefindexError("nothing to combine (no input)")
        return layout(self, self.order())

    def kinds(self) -> dict[str, str]:
        """Each array's part: "coordinate" (the concat one), "concat", "broadcast" or "once"."""
        assert self.ref is not None
        coords = coordinate_names(self.ref.zattrs, self.ref.attrs)
        out = {}
        for name in self.ref.zarrays:
            dims = self.ref.dims(name)
            if name == self.dim and dims == [self.dim] and self.steps is not None:
                out[name] = "coordinate"
            elif self.dim in dims:
                out[name] = "concat"
            else:
                out[name] = "once" if name in coords else "broadcast"
        return out
