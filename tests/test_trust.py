"""Trust and failure (issue 20): a changed source is never read through an old index, failures say
what went wrong in the user's words, a killed command leaves nothing behind, the suite cannot hang."""

from __future__ import annotations

import contextlib
import os

import h5py
import numpy as np
import pytest

import h5guard
import refindex
import refindex.pipeline
import webserver
from conftest import consumer_open, moto_s3, scan
from refindex.errors import StaleIndexError


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


# ------------------------------------------------------------------ freshness: the stale matrix
N = 8192  # 32 KiB per dataset: referenced, not copied into the index
A_VALUES = np.arange(N, dtype="<i4")
B_VALUES = -np.arange(N, dtype="<i4") - 1


def _pair_bytes(folder, swapped: bool) -> bytes:
    """A file of datasets "a" and "b"; ``swapped``: the same file written with their places swapped."""
    path = folder / ("swapped.h5" if swapped else "pair.h5")
    with h5py.File(path, "w") as f:
        for name in ("b", "a") if swapped else ("a", "b"):
            f.create_dataset(name, data=A_VALUES if name == "a" else B_VALUES)
    return path.read_bytes()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pair")
    original, swapped = _pair_bytes(folder, False), _pair_bytes(folder, True)
    assert len(original) == len(swapped) and original != swapped  # a rewrite at the same size
    return original, swapped


@pytest.fixture(scope="module")
def s3():
    with moto_s3() as opts:
        import s3fs

        fs = s3fs.S3FileSystem(**opts)
        fs.mkdir("trust")
        yield opts, fs


class _Place:
    """Where the matrix's file lives: put bytes there (with a modification time), and how to reach it."""

    def __init__(self, kind, tmp_path, server=None, s3=None):
        self.kind, self.tmp_path, self.server, self.s3 = kind, tmp_path, server, s3
        self.options = {k: v for k, v in s3[0].items()} if s3 else {}

    def put(self, data: bytes, mtime: float) -> str:
        if self.kind == "local":
            path = self.tmp_path / "pair.h5"
            path.write_bytes(data)
            os.utime(path, (mtime, mtime))
            return str(path)
        if self.kind == "s3":
            self.s3[1].pipe("trust/pair.h5", data)
            self.s3[1].invalidate_cache()
            return "s3://trust/pair.h5"
        return self.server.put("pair.h5", data, mtime)


SERVERS = {"etag+last-modified": dict(etag=True, last_modified=True), "last-modified": dict(etag=False),
           "neither": dict(etag=False, last_modified=False)}


@contextlib.contextmanager
def _place(kind, tmp_path, request):
    if kind in SERVERS:
        with webserver.serve(**SERVERS[kind]) as server:
            yield _Place(kind, tmp_path, server=server)
    elif kind == "s3":
        yield _Place(kind, tmp_path, s3=request.getfixturevalue("s3"))
    else:
        yield _Place(kind, tmp_path)


@pytest.mark.parametrize("through", ["saved index", "index cache"])
@pytest.mark.parametrize("kind", [*SERVERS, "local", "s3"])
def test_stale_matrix(kind, through, pair, tmp_path, request, monkeypatch):
    """A rewrite with two datasets' places swapped at the same size is never read through the old
    index; an unchanged file, also re-uploaded with the same bytes and a new time, is never refused
    (nor scanned again)."""
    original, swapped = pair
    scans = []
    real_scan = refindex.pipeline.scan_refs
    monkeypatch.setattr(refindex.pipeline, "scan_refs", lambda *a, **k: scans.append(1) or real_scan(*a, **k))
    t0 = 1_700_000_000.25
    with _place(kind, tmp_path, request) as place:
        url = place.put(original, t0)
        if through == "saved index":
            out = tmp_path / "pair.refs.json"
            refs = refindex.scan_to_file(url, out, storage_options=place.options, return_refs=True)["refs"]
            assert refs["refindex"]["source"]["fingerprint"]["complete"]

            def opened(**kw):
                return refindex.open(str(out), remote_options=place.options, **kw)
        else:
            def opened(**kw):
                return refindex.open(url, storage_options=place.options, cache=tmp_path / "cache", **kw)

        assert np.array_equal(opened()["a"][:], A_VALUES)
        scanned_before = len(scans)
        assert np.array_equal(opened()["b"][:], B_VALUES)  # unchanged: not refused
        place.put(original, t0 + 1000)  # the same bytes uploaded again: new Last-Modified (and ETag)
        assert np.array_equal(opened()["a"][:], A_VALUES)
        assert np.array_equal(opened()["a"][:], A_VALUES)
        assert len(scans) == scanned_before  # never scanned again for that
        # rewritten with the places swapped: within the second of the last write where the server's
        # time is in whole seconds (only the bytes can tell), later where the ETag is made from the
        # time or the filesystem's time is finer
        place.put(swapped, t0 + (1000 if kind in ("last-modified", "neither") else 2000.5))
        if through == "saved index":
            assert np.array_equal(opened(check_source=False)["a"][:], B_VALUES)  # what a stale read returns
            with pytest.raises(StaleIndexError, match="changed since it was indexed"):
                opened()
        else:
            assert np.array_equal(opened()["a"][:], A_VALUES)  # scanned again: the right values
            assert len(scans) == scanned_before + 1
            assert np.array_equal(opened()["b"][:], B_VALUES)
            assert len(scans) == scanned_before + 1
