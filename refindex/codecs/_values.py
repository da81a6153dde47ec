"""Values as JSON: fill values in zarr's form, attribute and element values as plain data."""

from __future__ import annotations

import base64
import math
from typing import Any, Callable

import h5py
import numpy as np

from ._longdouble import clear_long_padding

def fill_value_json(value: Any, dt: np.dtype) -> Any:
    """Encode an HDF5 fill value as zarr v2 .zarray ``fill_value``."""
    if value is None:
        return None
    arr = np.asarray(value)
    if dt.names is not None or dt.kind in "SV" or dt.subdtype is not None or (
            (dt.kind == "f" and dt.itemsize > 8) or (dt.kind == "c" and dt.itemsize > 16)):  # raw-bytes (|V16) types
        raw = clear_long_padding(np.asarray(value, dtype=dt) if arr.dtype != dt else arr).tobytes()
        if not any(raw) and dt.kind == "S":
            return ""
        return base64.standard_b64encode(raw).decode("ascii")
    scalar = arr.reshape(-1)[0] if arr.size else 0
    if dt.kind == "b":
        return bool(scalar)
    if dt.kind in "iu":
        return int(scalar)
    if dt.kind == "f":
        return _float_json(float(scalar))
    if dt.kind == "c":
        c = complex(scalar)
        return [_float_json(c.real), _float_json(c.imag)]
    if dt.kind in "Mm":  # zarr takes datetimes' fill as the int64 count
        return int(np.asarray(scalar, dtype=dt).astype(dt.newbyteorder("=")).view(np.int64))
    return None


def _float_json(v: float) -> Any:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def jsonable(value: Any, ref_to_json_obj: Callable[[Any], Any] | None = None) -> Any:
    """Turn an h5py attribute or element value into plain JSON data.

    bytes become text (UTF-8, else Latin-1 so no byte is lost), numpy scalars become
    Python numbers, compound records become dicts, references go through
    ``ref_to_json_obj``.  NaN and infinities stay floats; the JSON writer emits them as
    ``NaN``/``Infinity``, which zarr's JSON reader accepts.
    """
    if isinstance(value, h5py.Empty) or value is None:
        return None
    if isinstance(value, (h5py.Reference, h5py.RegionReference)):
        if ref_to_json_obj is None:
            return None if not value else str(value)
        return ref_to_json_obj(value)
    if isinstance(value, (bytes, np.bytes_)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(value).decode("latin-1")
    if isinstance(value, str):
        return value
    if isinstance(value, np.void):
        if value.dtype.names:
            return {n: jsonable(value[n], ref_to_json_obj) for n in value.dtype.names}
        return base64.standard_b64encode(value.tobytes()).decode("ascii")
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (complex, np.complexfloating)):
        return [float(value.real), float(value.imag)]
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return jsonable(value[()], ref_to_json_obj)
        return [jsonable(v, ref_to_json_obj) for v in value]
    if isinstance(value, (list, tuple)):
        return [jsonable(v, ref_to_json_obj) for v in value]
    return str(value)


_JSON_NUMBERS = (np.dtype("int64"), np.dtype("float64"))


def lost_type(value: Any) -> str | None:
    """The numpy type of an attribute value that its JSON form does not keep, as ``dtype.str``, else None.

    JSON reads back as Python ``int``/``float``/``bool`` and lists: numbers of another width
    or sign (``uint64``, ``int32``, ``float32``...) and arrays of numbers or booleans (read
    back as lists) lose their type; text, references, native ``int64``/``float64``/``bool``
    scalars and compound records do not.  ``numpy.asarray(json_value, dtype)`` restores the
    value exactly (JSON keeps every digit of what was written).
    """
    if isinstance(value, np.ndarray) and value.ndim and value.dtype.kind in "biuf":
        return value.dtype.str
    if isinstance(value, np.generic) and value.dtype.kind in "iuf" and value.dtype not in _JSON_NUMBERS:
        return value.dtype.str
    return None
