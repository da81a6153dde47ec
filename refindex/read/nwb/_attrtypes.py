"""Attribute types JSON cannot carry, put back before hdmf builds an NWB file from an index.

An index's attributes are JSON: a ``uint64`` or ``float32`` attribute reads back as a Python
``int``/``float`` and an array attribute as a list.  hdmf's constructors check types
(ndx-pose's ``SkeletonInstance.id`` must be unsigned), so hdmf-zarr alone fails on such a
file from any zarr store; ``NWBHDF5IO`` hands over what h5py read.  The scan records each
such attribute's numpy type in the index's provenance (``attribute_types``: ``{"/path":
{"name": "<u8"}}``, see :mod:`refindex.conventions._hdmftext`); :func:`restore_attribute_types`
casts the builder tree's values back before the containers are made, so ``open_nwb``
returns what ``NWBHDF5IO`` does.  A value the recorded type would change is left alone.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np


def recorded_types(provenance: Any) -> dict[str, dict[str, str]]:
    """The ``attribute_types`` section of an index's provenance ({} when it has none)."""
    found = provenance.get("attribute_types") if isinstance(provenance, dict) else None
    return found if isinstance(found, dict) else {}


def provenance_of(loaded: Any, store: Any) -> dict[str, Any]:
    """An index's provenance: its ``refindex`` section (JSON indexes), or the one its consolidated
    metadata carries (parquet indexes)."""
    if isinstance(loaded, dict):
        return loaded.get("refindex") or {}
    inline = getattr(store, "inline", None)
    raw = inline(".zmetadata") if inline is not None else None
    try:
        return (json.loads(raw) or {}).get("refindex") or {} if raw else {}
    except ValueError:
        return {}


def restored(value: Any, dtype_text: str) -> Any:
    """``value`` (as read from JSON) as the numpy type ``dtype_text``, or unchanged when that would
    change it (or it is not a number or a list of them)."""
    if isinstance(value, (dict, str)) or value is None:
        return value
    try:
        dt = np.dtype(dtype_text)
        out = np.asarray(value, dtype=dt)
        same = np.array_equal(out, np.asarray(value), equal_nan=dt.kind == "f")
    except (TypeError, ValueError, OverflowError):
        return value
    if not same:
        return value
    return out if isinstance(value, (list, tuple, np.ndarray)) else out[()]


def restore_attribute_types(root: Any, types: dict[str, dict[str, str]]) -> int:
    """Cast the attributes of hdmf builder tree ``root`` (its objects, not links) to their recorded
    types, keyed by HDF5 path; returns how many were cast."""
    if not types:
        return 0
    done = 0
    stack = [("/", root)]
    while stack:
        path, builder = stack.pop()
        wanted = types.get(path)
        if wanted:
            attrs = builder.attributes
            for name, dtype_text in wanted.items():
                if name in attrs:
                    attrs[name] = restored(attrs[name], dtype_text)
                    done += 1
        base = "" if path == "/" else path
        for kind in ("groups", "datasets"):
            children = getattr(builder, kind, None) or {}
            stack.extend((f"{base}/{name}", child) for name, child in children.items())
    return done
