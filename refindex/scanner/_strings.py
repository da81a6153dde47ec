"""Fixed-length strings: are the stored bytes the bytes libhdf5 returns?

libhdf5 hands NULL-terminated and space-padded strings to h5py as NULL-padded: it
clears whatever follows the terminator and turns trailing pad spaces into NULs.  Only
where that changes the stored bytes does an index need refindex's string codec, or the
normalised bytes copied in; most files hold clean strings and are referenced as plain
``|S<n>``, which any zarr reader opens.
"""

from __future__ import annotations

import h5py
import numpy as np

BLOCK_BYTES = 8 << 20  # compared a block of rows at a time
STRINGS_INLINE_MAX = 4 << 20  # normalised strings up to this size are copied in (beyond: the codec)


def stored_strings_clean(d: h5py.Dataset, nd: np.dtype, limit: int) -> bool | None:
    """True when libhdf5 returns every stored string unchanged, False when it changes some,
    None when the dataset is larger than ``limit`` bytes (not read to find out)."""
    shape = d.shape or ()
    if int(np.prod(shape, dtype=np.int64)) * nd.itemsize > limit:
        return None
    if not d.id.get_storage_size():
        return True  # nothing stored: every element reads as the fill value
    ftype = d.id.get_type()
    if not shape:
        return _same(d, nd, ftype, (), h5py.h5s.ALL, h5py.h5s.ALL)
    row = max(1, nd.itemsize * int(np.prod(shape[1:], dtype=np.int64)))
    step = max(1, BLOCK_BYTES // row)
    for start in range(0, shape[0], step):
        count = (min(step, shape[0] - start),) + tuple(shape[1:])
        fspace = d.id.get_space()
        fspace.select_hyperslab((start,) + (0,) * (len(shape) - 1), count)
        if not _same(d, nd, ftype, count, h5py.h5s.create_simple(count), fspace, start):
            return False
    return True


def _same(d: h5py.Dataset, nd: np.dtype, ftype, shape: tuple, mspace, fspace, start: int | None = None) -> bool:
    """Read one block twice: as stored (memory type = file type, no conversion) and as h5py does."""
    raw = np.empty(shape, dtype=nd)
    d.id.read(mspace, fspace, raw, mtype=ftype)
    values = np.asarray(d[start:start + shape[0]] if start is not None else d[()], dtype=nd)
    return raw.tobytes() == np.ascontiguousarray(values).tobytes()
