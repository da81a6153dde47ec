"""The combined dataset's arrays from the combine's columns, once every file is in (see _combine_plan)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import RefindexError
from ._combine_times import encode_steps

if TYPE_CHECKING:
    from ._combine_plan import Combination

STRIPPED = ("_FillValue", "missing_value", "scale_factor", "add_offset")  # the coordinate is stored plain


@dataclass
class OutArray:
    """One array of the combined dataset: metadata and chunk columns (url -1: inline, in OutLayout.inline)."""

    zarray: dict[str, Any]
    zattrs: dict[str, Any]
    coords: np.ndarray
    url: np.ndarray
    offset: np.ndarray
    size: np.ndarray


@dataclass
class OutLayout:
    attrs: dict[str, Any]
    arrays: dict[str, OutArray]
    urls: list[str]
    inline: bytes
    files: int


def layout(c: Combination, order: np.ndarray) -> OutLayout:
    assert c.first is not None and c.ref is not None
    first = c.first[1]
    lengths = c.length.values
    start = np.zeros(len(lengths), dtype=np.int64)
    start[order] = np.cumsum(lengths[order]) - lengths[order]
    total = int(lengths.sum())
    inline = c.inline
    urls = list(c.url_ids)
    arrays: dict[str, OutArray] = {}
    for name, kind in c.kinds().items():
        za, attrs = dict(first.zarrays[name]), dict(first.zattrs[name])
        if kind == "concat":
            arrays[name] = concat_array(c, name, za, attrs, order, start, total)
        elif kind == "broadcast":
            arrays[name] = broadcast_array(c, name, za, attrs, start, total)
        elif kind == "once":
            arrays[name], urls, inline = once_array(c, name, za, attrs, urls, inline)
        else:
            arrays[name], inline = coordinate_array(c, za, attrs, order, total, inline)
    return OutLayout(dict(first.attrs), arrays, urls, bytes(inline), len(lengths))


def out_array(za: dict[str, Any], attrs: dict[str, Any], coords: np.ndarray, url: np.ndarray, offset: np.ndarray,
              size: np.ndarray) -> OutArray:
    return OutArray(za, attrs, coords, url, offset, size)


def concat_array(c: Combination, name: str, za: dict[str, Any], attrs: dict[str, Any], order: np.ndarray,
                 start: np.ndarray, total: int) -> OutArray:
    """A variable along the concat dimension: each file's chunks moved to its place along it."""
    axis = attrs["_ARRAY_DIMENSIONS"].index(c.dim)
    step = int(za["chunks"][axis])
    lengths = c.length.values
    for f in order[:-1].tolist():
        if lengths[f] % step:
            raise RefindexError(f"cannot combine: variable {name!r} has chunks of {step} along {c.dim!r}, and "
                                f"{c.sources[f]} holds {int(lengths[f])} steps (not a whole number of chunks) "
                                "but is not the last file: one zarr array cannot have a chunk of another length "
                                "in the middle")
    r = c.rows[name]
    coords = r.coords.values.copy()
    files = r.file.values
    coords[:, axis] += start[files] // step
    za["shape"] = [total if i == axis else s for i, s in enumerate(za["shape"])]
    return out_array(za, attrs, coords, r.url.values, r.offset.values, r.size.values)


def broadcast_array(c: Combination, name: str, za: dict[str, Any], attrs: dict[str, Any], start: np.ndarray,
                    total: int) -> OutArray:
    """A data variable without the concat dimension: xarray's default (``data_vars="all"``) gives it the
    dimension, each step holding its file's values; every step refers to the file's chunks."""
    r = c.rows[name]
    files = r.file.values
    reps = c.length.values[files]
    rows = np.repeat(np.arange(len(files)), reps)
    first_of_row = np.repeat(np.cumsum(reps) - reps, reps)
    steps = start[files][rows] + (np.arange(len(rows)) - first_of_row)
    inner = r.coords.values[rows] if r.ndim else np.zeros((len(rows), 0), dtype=np.int64)
    coords = np.column_stack([steps, inner]).astype(np.int64)
    za["shape"] = [total, *za["shape"]]
    za["chunks"] = [1, *za["chunks"]]
    attrs["_ARRAY_DIMENSIONS"] = [c.dim, *attrs.get("_ARRAY_DIMENSIONS", [])]
    return out_array(za, attrs, coords, r.url.values[rows], r.offset.values[rows], r.size.values[rows])


def once_array(c: Combination, name: str, za: dict[str, Any], attrs: dict[str, Any], urls: list[str],
               inline: bytearray) -> tuple[OutArray, list[str], bytearray]:
    """A coordinate without the concat dimension (equal in every file, checked): the earliest file's chunks."""
    assert c.first is not None
    d = c.first[1]
    cols = d.chunks[name]
    ids = {u: i for i, u in enumerate(urls)}
    remap = np.array([ids.setdefault(u, len(ids)) for u in d.urls] + [-1], dtype=np.int32)
    base = len(inline)
    inline += d.inline
    offset = np.where(cols.url == -1, cols.offset + base, cols.offset)
    return out_array(za, attrs, cols.coords, remap[cols.url], offset, cols.size), list(ids), inline


def coordinate_array(c: Combination, za: dict[str, Any], attrs: dict[str, Any], order: np.ndarray, total: int,
                     inline: bytearray) -> tuple[OutArray, bytearray]:
    """The concat coordinate, one inline chunk: the files' numbers when they share units, else encoded anew."""
    assert c.steps is not None and c.raw is not None and c.enc is not None
    lengths, begin = c.length.values, c.step_start.values
    reps = lengths[order]
    pick = np.repeat(begin[order] - (np.cumsum(reps) - reps), reps) + np.arange(total)
    if c.uniform:
        values = c.raw.values[pick].astype(np.dtype(za["dtype"]))
    else:
        bounds = [attrs[k] for k in ("bounds", "climatology") if isinstance(attrs.get(k), str)]
        for b in bounds:
            if b in c.rows:
                raise RefindexError(f"cannot combine: the files store {c.dim!r} in their own units, and its "
                                    f"bounds {b!r} are numbers in those units; refindex re-encodes {c.dim!r} "
                                    f"but cannot re-encode bounds held by reference")
        values, units = encode_steps(c.steps.values[pick], c.enc, c.dim)
        za["dtype"], za["fill_value"] = "<i8", None
        attrs = {k: v for k, v in attrs.items() if k not in STRIPPED} | {"units": units}
    za.update(shape=[total], chunks=[total], compressor=None, filters=None)
    base = len(inline)
    data = np.ascontiguousarray(values).tobytes()
    inline += data
    arr = out_array(za, attrs, np.zeros((1, 1), dtype=np.int64), np.array([-1], dtype=np.int32),
                    np.array([base], dtype=np.int64), np.array([len(data)], dtype=np.int64))
    return arr, inline
