"""Long double and complex256: numbers zarr has no data type for, kept as raw bytes (``|V16``/``|V32``)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

def zarr_lacks(dt: np.dtype) -> bool:
    """A numpy number type zarr has no data type for: long double and complex256 (``<f16``, ``<c32``)."""
    return (dt.kind == "f" and dt.itemsize > 8) or (dt.kind == "c" and dt.itemsize > 16)


def holds_zarr_lacks(dt: np.dtype) -> bool:
    """Does ``dt`` (or a field, or an element type) need the raw-bytes form of :func:`zarr_lacks`?"""
    if dt.names is not None:
        return any(holds_zarr_lacks(dt.fields[n][0]) for n in dt.names)
    if dt.subdtype is not None:
        return holds_zarr_lacks(dt.subdtype[0])
    return zarr_lacks(dt)


_X87 = np.finfo(np.longdouble).nmant == 63 and np.dtype(np.longdouble).itemsize == 16


def clear_long_padding(a: np.ndarray) -> np.ndarray:
    """``a`` with the 6 unused bytes of each x87 long double zeroed (they hold whatever memory held,
    which would make the same file give different index bytes run to run)."""
    if not _X87 or not holds_zarr_lacks(a.dtype):
        return a
    out = np.array(a, copy=True, order="C")
    rows = out.reshape(-1).view(np.uint8).reshape(out.size, a.dtype.itemsize)
    for off, big in _long_parts(a.dtype, 0):
        if big:
            rows[:, off:off + 6] = 0
        else:
            rows[:, off + 10:off + 16] = 0
    return out


def _long_parts(t: np.dtype, base: int) -> Iterator[tuple[int, bool]]:
    """(byte offset, big-endian?) of every 16-byte long double inside one item of ``t``."""
    if t.names is not None:
        for n in t.names:
            sub, off = t.fields[n][:2]
            yield from _long_parts(sub, base + off)
    elif t.subdtype is not None:
        sub, shape = t.subdtype
        for i in range(int(np.prod(shape))):
            yield from _long_parts(sub, base + i * sub.itemsize)
    elif zarr_lacks(t):
        for k in range(t.itemsize // 16):
            yield base + 16 * k, t.byteorder == ">"
