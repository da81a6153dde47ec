"""Fill values of a plain zarr v2 index: "missing" only where the file says so.

xarray reads a v2 array's ``fill_value`` as its ``_FillValue`` and masks every element equal
to it.  HDF5 gives every dataset a fill value (0 unless set, netCDF-C's defaults for its
variables), which means "never written", not "missing": netCDF readers mask only by the
``_FillValue`` / ``missing_value`` attributes.  So a plain v2 array states

* ``fill_value``: its ``_FillValue`` attribute where it has one (netCDF writers make HDF5's
  fill value the same), else ``null``, which zarr reads as zeros and xarray as "no mask";
* chunks the file never wrote, when zarr would read them otherwise than libhdf5 does (the
  fill value stated is not HDF5's, and HDF5's is not all zero bytes): written into the
  index as chunks of HDF5's fill value (one encoded chunk, the same bytes under each key;
  a compressed constant chunk is a few dozen bytes).

An array with no chunk stored at all is free to take any chunking and codec: it gets row
chunks of about 4 MiB compressed with zstd (a constant 4 MiB chunk is ~400 bytes).  An array
whose unwritten chunks cannot be written so (codecs refindex cannot encode with, more than
:data:`MAX_FILL_CHUNKS` of them or :data:`MAX_FILL_BYTES` of encoded chunks) keeps HDF5's
fill value as ``fill_value``: zarr reads it exactly, and xarray masks that value; the array
is named in the provenance's ``fill_masked`` list.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np

from ..codecs import dtype_of, encode_chunk, fill_value_json, jsonable
from ..model import ArrayNode, Tree

MAX_FILL_CHUNKS = 100_000  # unwritten chunks written as fill chunks into one array, at most
MAX_FILL_BYTES = 8 << 20  # ... and bytes of them (encoded)
FREE_CHUNK_BYTES = 4 << 20  # the chunk size of an array with nothing stored
FREE_COMPRESSOR = {"id": "zstd", "level": 1}
MASKED = "fill_masked"  # provenance: arrays whose fill_value stays HDF5's (see the module)


def xarray_fill_values(tree: Tree) -> None:
    """Set every plain v2 array's ``fill_value`` as xarray expects (see the module), in place."""
    masked = []
    for path, node in tree.arrays.items():
        if node.dtype == "|O" or node.fill_value is None and "_FillValue" not in node.attrs:
            continue
        try:
            dt = dtype_of(node.dtype)
        except (ValueError, TypeError):
            continue
        if not _xarray_fill(node, dt):
            masked.append(path)
    if masked:
        tree.provenance[MASKED] = masked


def _xarray_fill(node: ArrayNode, dt: np.dtype) -> bool:
    """Set ``node``'s fill value and fill chunks; False when it had to keep HDF5's fill value."""
    hdf5_fill = node.fill_value
    stated = _attribute_fill(node.attrs.get("_FillValue"), dt, hdf5_fill)
    if stated is not None and stated == hdf5_fill:
        return True  # netCDF's case: HDF5's fill value is the attribute's
    if _fill_bytes(stated, dt) == _fill_bytes(hdf5_fill, dt):
        node.fill_value = stated
        return True
    missing = _unwritten(node)
    if missing is not None and not len(missing):
        node.fill_value = stated
        return True
    if missing is None or len(missing) > MAX_FILL_CHUNKS:
        return False
    if not node.inline and not (node.refs is not None and len(node.refs)) and node.shape:
        _free_chunking(node, dt)  # nothing stored: chunks of our choosing
        missing = _unwritten(node)
    try:
        chunk = np.full(node.chunks, _fill_scalar(hdf5_fill, dt), dtype=dt) if dt.names is None else np.frombuffer(
            _fill_bytes(hdf5_fill, dt) * int(np.prod(node.chunks, dtype=np.int64)), dtype=dt).reshape(node.chunks)
        data = encode_chunk(chunk, node.filters, node.compressor)
    except Exception:  # noqa: BLE001 - a codec refindex only decodes
        return False
    if len(data) * len(missing) > MAX_FILL_BYTES:
        return False
    for coords in missing:
        node.inline[".".join(str(int(c)) for c in coords) if len(coords) else "0"] = data
    node.fill_value = stated
    return True


def _free_chunking(node: ArrayNode, dt: np.dtype) -> None:
    """Row chunks of about :data:`FREE_CHUNK_BYTES`, zstd: for an array none of whose chunks is stored."""
    row = max(1, dt.itemsize * math.prod(int(s) for s in node.shape[1:]))
    rows = max(1, min(int(node.shape[0]), FREE_CHUNK_BYTES // row))
    node.chunks = (rows,) + tuple(max(1, int(s)) for s in node.shape[1:])
    node.filters, node.compressor = None, dict(FREE_COMPRESSOR)


def _attribute_fill(value: Any, dt: np.dtype, hdf5_fill: Any = None) -> Any:
    """A ``_FillValue`` attribute's value as a v2 ``fill_value`` of ``dt`` (None: none, or not one of ``dt``).

    Text stands for bytes as the scanner decoded them (UTF-8, else Latin-1): the bytes of
    HDF5's fill value when they read as that text (netCDF's case), else its UTF-8, else its
    Latin-1 bytes that fit the type."""
    if value is None or isinstance(value, (list, dict)) or dt.names is not None:
        return None
    try:
        if dt.kind in "SV":
            if not isinstance(value, str):
                return None
            hdf5_raw = bytes(np.asarray(_fill_scalar(hdf5_fill, dt), dtype=dt).tobytes()).rstrip(b"\0")
            if jsonable(hdf5_raw) == value:
                return hdf5_fill
            for codec in ("utf-8", "latin-1"):
                try:
                    raw = value.encode(codec)
                except UnicodeEncodeError:
                    continue
                if len(raw) <= dt.itemsize:
                    return fill_value_json(np.asarray(raw, dtype=dt)[()], dt)
            return None
        if isinstance(value, str):
            return None
        scalar = np.asarray(value).astype(dt)[()]
        if dt.kind in "iub" and (not np.isfinite(float(np.real(value))) or scalar != value):
            return None  # not a value of this type
        return fill_value_json(scalar, dt)
    except (ValueError, TypeError, OverflowError):
        return None


def _fill_scalar(v2_fill: Any, dt: np.dtype) -> Any:
    """The numpy value a v2 ``fill_value`` stands for (zarr's reading of ``null``: zeros; NaT for times)."""
    if v2_fill is None:
        return np.asarray(np.iinfo(np.int64).min).view(dt.newbyteorder("="))[()] if dt.kind in "Mm" else \
            np.zeros((), dt)[()]
    if dt.kind in "SV" or dt.names is not None or (dt.kind in "fc" and isinstance(v2_fill, str) and
                                                     v2_fill not in ("NaN", "Infinity", "-Infinity")):
        raw = base64.standard_b64decode(v2_fill) if v2_fill else b""
        return np.frombuffer(raw.ljust(dt.itemsize, b"\0"), dtype=dt)[0]
    if dt.kind == "c":
        return complex(_number(v2_fill[0]), _number(v2_fill[1]))
    if dt.kind == "f":
        return _number(v2_fill)
    if dt.kind in "Mm":
        return np.asarray(int(v2_fill), dtype=np.int64).view(dt.newbyteorder("="))[()]
    return np.asarray(v2_fill).astype(dt)[()]


def _number(v: Any) -> float:
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(v, v) if isinstance(v, str) else v


def _fill_bytes(v2_fill: Any, dt: np.dtype) -> bytes:
    """The bytes of one element zarr gives an unwritten chunk with this ``fill_value``."""
    return np.asarray(_fill_scalar(v2_fill, dt), dtype=dt).tobytes()


def _unwritten(node: ArrayNode) -> np.ndarray | None:
    """Grid positions of the chunks neither referenced nor inline ((n, ndim) ints); None when more
    than :data:`MAX_FILL_CHUNKS`."""
    grid = tuple(-(-int(s) // int(c)) for s, c in zip(node.shape, node.chunks))
    cells = math.prod(grid)
    ndim = len(grid)
    stored = node.refs.coords if node.refs is not None and len(node.refs) else np.zeros((0, ndim), np.int64)
    if not cells or len(stored) == cells or len(node.inline) == cells:
        return np.zeros((0, ndim), np.int64)  # (a table lists each chunk once)
    if cells - len(stored) - len(node.inline) > MAX_FILL_CHUNKS:
        return None
    if not ndim:  # a 0-d array with nothing stored
        return np.zeros((1, 0), np.int64)
    have = np.zeros(grid, bool)
    if len(stored):
        have[tuple(stored.T.astype(np.intp))] = True
    for key in node.inline:
        have[tuple(int(p) for p in key.split("."))] = True
    return np.argwhere(~have)
