"""Exact comparison of values read two ways (h5py and zarr), shared by scan checks and verify."""

from __future__ import annotations

import h5py
import numpy as np


def leaf_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Exact equality of two plain arrays: same shape, same values bit for bit (NaNs included)."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.names:
        return all(leaf_equal(a[n], b[n]) for n in a.dtype.names)
    if a.dtype.subdtype is not None or b.dtype.subdtype is not None:
        return a.tobytes() == b.tobytes()
    if a.dtype.kind in "fc" and (a.dtype.itemsize > (8 if a.dtype.kind == "f" else 16)):
        return _long_equal(a, b)  # long doubles: their padding bytes hold whatever the writer left
    if a.dtype.kind in "fc" and a.dtype != b.dtype:
        b = b.astype(a.dtype)
    elif a.dtype != b.dtype and a.dtype.kind in "iub":
        if not np.can_cast(b.dtype, a.dtype, "same_kind"):
            return False
        b = b.astype(a.dtype)
    return a.astype(a.dtype.newbyteorder("=")).tobytes() == b.astype(a.dtype.newbyteorder("=")).tobytes() \
        if a.dtype.kind in "iufcb" else a.tobytes() == b.tobytes()


def _long_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values (NaN equal to NaN, signs of zeros compared) for long double and complex256."""
    if b.dtype.kind not in "fc":
        return False
    a = a.astype(a.dtype.newbyteorder("="))
    b = b.astype(a.dtype)
    parts = (a.real, a.imag, b.real, b.imag) if a.dtype.kind == "c" else (a, None, b, None)
    for x, y in ((parts[0], parts[2]), (parts[1], parts[3])):
        if x is None:
            continue
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if not (same.all() and (np.signbit(x) == np.signbit(y)).all()):
            return False
    return True


def records_equal(h: np.ndarray, z: np.ndarray) -> bool:
    """Field-by-field equality; a sub-array field stored as a nested record ("0", "1", ...)
    compares element by element (a zarr v3 reader returns records in the native byte order)."""
    if z.dtype.names and h.ndim > z.ndim:
        flat = np.asarray(h).reshape(z.shape + (-1,))
        if flat.shape[-1] != len(z.dtype.names):
            return False
        return all(records_equal(flat[..., i], z[n]) for i, n in enumerate(z.dtype.names))
    if h.dtype.names:
        if not z.dtype.names or any(n not in z.dtype.names for n in h.dtype.names):
            return False
        return all(records_equal(h[n], z[n]) for n in h.dtype.names)
    if z.dtype.names:
        return np.ascontiguousarray(h).tobytes() == np.ascontiguousarray(z).tobytes()
    return leaf_equal(h, z)


def values_of(d: h5py.Dataset):
    """What reads ``d``'s values as libhdf5 converts them: ``d`` itself, or, for long doubles in
    another byte order, ``d.astype`` the native order (h5py 3.16 reads big-endian complex256
    through a little-endian memory type and returns wrong numbers)."""
    dt = d.dtype

    def foreign_long(t: np.dtype) -> bool:
        if t.names is not None:
            return any(foreign_long(t.fields[n][0]) for n in t.names)
        if t.subdtype is not None:
            return foreign_long(t.subdtype[0])
        return t.kind in "fc" and t.itemsize > (8 if t.kind == "f" else 16) and not t.isnative

    return d.astype(dt.newbyteorder("=")) if foreign_long(dt) else d


def object_key(obj) -> tuple:
    """(file number, object address) of an h5py object: equal keys mean one HDF5 object.

    Uses ``H5Gget_objinfo`` (header fields only).  ``h5o.get_info`` asks libhdf5 for every
    field, including the metadata size of a chunked dataset, which walks its whole chunk
    index: 65 ms per call for 500,000 chunks, and extra requests on a remote file.
    """
    st = h5py.h5g.get_objinfo(obj.id if isinstance(obj, h5py.HLObject) else obj)  # an h5py object, or a low-level id
    return (st.fileno, st.objno)
