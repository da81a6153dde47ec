"""Trust and failure (issue 20): a changed source is never read through an old index, failures say
what went wrong in the user's words, a killed command leaves nothing behind, the suite cannot hang."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import h5guard
from conftest import consumer_open, scan


def _two(path):
    with h5py.File(path, "w") as f:
        f.create_dataset("a", data=np.arange(100, dtype="i4"))
        f.create_dataset("b", data=np.arange(100, 200, dtype="i4"))
    return path


# ------------------------------------------------------------------ the suite's own hang
def test_zarr_read_inside_visititems_fails_loudly(tmp_path):
    """zarr inside h5py's visititems can deadlock (a GC on zarr's loop thread frees an h5py object);
    the guard every test process installs makes it an immediate error instead of a hang."""
    path = _two(tmp_path / "two.h5")
    g = consumer_open(scan(path))
    with h5py.File(path, "r") as f:
        with pytest.raises(h5guard.HeldLockRead, match="holds h5py's lock .inside an h5py visit callback"):
            f.visititems(lambda name, obj: g[name][...] if isinstance(obj, h5py.Dataset) else None)
        # outside the callback, the same reads work
        assert [int(g[n][0]) for n in ("a", "b")] == [0, 100]
