"""Which chunks the h5py read in progress needs: the selection seen from the file object.

libhdf5 reads a selection's chunks one at a time, each through the file object, which
sees offsets only: where the selection ends it cannot tell, so a read-ahead guesses (and
overshoots, or waits a round trip per guess).  The selection is known, though, one level
up the same thread's stack: h5py's ``Dataset.__getitem__`` (``args``: the user's
indices) or ``read_direct`` (its ``source_sel``), waiting in libhdf5 for these reads.
:func:`selection_in_progress` finds that frame; :func:`wanted_chunks` turns its indices
into the chunks' places in the grid, from the index's shape and chunk shape alone.

Nothing here calls into libhdf5 (the file object runs inside a libhdf5 call, which is not
reentrant): the indices are read as h5py was given them and computed with numpy.  What
is not understood (field names aside: region references, h5py's ``MultiBlockSlice``,
other h5py versions' frames) gives None: the read-ahead then guesses as before.  A wrong
answer can only fetch the wrong chunks ahead; every read is still served the file's bytes.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

MAX_CHUNKS = 1 << 24  # a selection touching more grid places than this is left to the guesses
_CALLS = ("__getitem__", "read_direct")


def selection_in_progress(depth: int = 48) -> tuple[Any, tuple] | None:
    """(a key of the h5py call in progress, its indices as a tuple) when this thread is inside
    h5py's ``Dataset.__getitem__`` or ``read_direct``, else None."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name in _CALLS and code.co_filename.replace("\\", "/").endswith("h5py/_hl/dataset.py"):
            found = _indices(frame)
            if found is not None:
                return (id(frame), _signature(found)), found
        frame = frame.f_back
    return None


def _indices(frame: Any) -> tuple | None:
    loc = frame.f_locals
    if type(loc.get("self")).__name__ != "Dataset":
        return None
    if frame.f_code.co_name == "__getitem__":
        args = loc.get("args", ())
        return args if isinstance(args, tuple) else (args,)
    chosen = loc.get("source_sel")  # read_direct: a Selection by the time libhdf5 reads
    hyper = getattr(chosen, "_sel", None) if type(chosen).__name__ == "SimpleSelection" else None
    if chosen is None:
        return ()
    if not (isinstance(hyper, tuple) and len(hyper) == 4):
        return None
    return tuple(slice(a, a + (n - 1) * s + 1 if n else a, s) for a, n, s, _ in zip(*hyper[:3], hyper[3]))


def _signature(args: tuple) -> tuple:
    """What tells two calls apart (a frame's id may be reused by the next call)."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, slice):
            out.append(("s", a.start, a.stop, a.step))
        elif isinstance(a, (int, np.integer, str)) or a is Ellipsis:
            out.append(a if a is Ellipsis else ("i", a))
        else:
            out.append(("o", id(a)))
    return tuple(out)


def wanted_chunks(args: tuple, shape: tuple[int, ...], chunks: tuple[int, ...]) -> np.ndarray | None:
    """The C-order grid places (sorted) of the chunks ``dataset[args]`` touches, for a dataset of
    ``shape`` in chunks of ``chunks``; None when the indices are not understood."""
    ndim = len(shape)
    if ndim == 0 or len(chunks) != ndim or not all(int(c) > 0 for c in chunks):
        return None
    args = tuple(a for a in args if not isinstance(a, str))  # field names: the same chunks
    grid = [-(-int(s) // int(c)) for s, c in zip(shape, chunks)]
    if len(args) == 1 and isinstance(args[0], np.ndarray) and args[0].dtype == bool and args[0].shape == tuple(shape):
        coords = np.nonzero(args[0])  # a mask over the whole dataset
        places = np.ravel_multi_index(tuple(c // int(k) for c, k in zip(coords, chunks)), grid) if grid else None
        return None if places is None else np.unique(places)
    if sum(a is Ellipsis for a in args) > 1:
        return None
    if any(a is Ellipsis for a in args):
        i = next(i for i, a in enumerate(args) if a is Ellipsis)
        args = args[:i] + (slice(None),) * (ndim - len(args) + 1) + args[i + 1:]
    if len(args) > ndim:
        return None
    args = args + (slice(None),) * (ndim - len(args))
    per_dim = []
    for a, n, c in zip(args, shape, chunks):
        places = _places(a, int(n), int(c))
        if places is None:
            return None
        per_dim.append(places)
    if float(np.prod([float(len(p)) for p in per_dim])) > MAX_CHUNKS:
        return None
    strides = np.cumprod([1] + grid[::-1][:-1])[::-1]
    total = np.zeros(1, np.int64)
    for places, stride in zip(per_dim, strides):
        total = (total[:, None] + places[None, :].astype(np.int64) * int(stride)).ravel()
    return total  # C order: ascending


def _places(a: Any, n: int, c: int) -> np.ndarray | None:
    """The chunk places along one dimension (length ``n``, chunks of ``c``) that index ``a`` touches."""
    if isinstance(a, (bool, np.bool_)):
        return None
    if isinstance(a, (int, np.integer)):
        i = int(a) + (n if int(a) < 0 else 0)
        return np.asarray([i // c], np.int64) if 0 <= i < n else None
    if isinstance(a, slice):
        start, stop, step = a.indices(n)
        if step <= 0:
            return None
        if stop <= start:
            return np.zeros(0, np.int64)
        last = start + (stop - 1 - start) // step * step
        if step <= c:  # every chunk from the first to the last has an element
            return np.arange(start // c, last // c + 1, dtype=np.int64)
        if (last - start) // step >= MAX_CHUNKS:
            return None
        return np.unique(np.arange(start, last + 1, step, dtype=np.int64) // c)
    if isinstance(a, (list, np.ndarray)):
        arr = np.asarray(a)
        if arr.ndim != 1 or arr.size > MAX_CHUNKS:
            return None
        if arr.dtype == bool:
            if arr.shape[0] != n:
                return None
            arr = np.nonzero(arr)[0]
        elif not np.issubdtype(arr.dtype, np.integer):
            return None if arr.size else np.zeros(0, np.int64)
        arr = arr.astype(np.int64)
        arr = np.where(arr < 0, arr + n, arr)
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            return None
        return np.unique(arr // c)
    return None
