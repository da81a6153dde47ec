"""Shared helpers for refindex tests.

The consumer path is implemented here with plain fsspec + zarr, never through
refindex's own reader: what a user with only zarr (and refindex's numcodecs entry
points) installed would do.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import re
import os
import socket
from typing import Any, Iterator

import fsspec
import h5py
import numpy as np
import pytest
import zarr

import refindex

# Every chunk table the native index readers make in this suite is compared with libhdf5's
# (refindex.scanner._listing): a difference fails the scan.  Worker processes inherit it.
os.environ.setdefault("REFINDEX_CHECK_CHUNK_INDEX", "1")


def consumer_store(refs: dict[str, Any]) -> zarr.storage.FsspecStore:
    """The store a zarr user builds over an index: async ReferenceFileSystem + FsspecStore."""
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True)
    return zarr.storage.FsspecStore(fs, read_only=True, path="")


def consumer_open(refs: dict[str, Any]) -> zarr.Group:
    """Open an index the way a zarr user would."""
    return zarr.open_group(consumer_store(refs), mode="r", zarr_format=2)


def notes(refs: dict[str, Any], path: str) -> dict[str, Any]:
    """refindex's own attributes of node ``path`` ("a/b", "" for the root): a plain index keeps them in its
    provenance (``hidden_attributes``), out of the attributes xarray shows."""
    from refindex.read import notes as read_notes

    return read_notes(refs, path)


def json_roundtrip(refs: dict[str, Any]) -> dict[str, Any]:
    """What a consumer gets after the index went through a JSON file."""
    return json.loads(json.dumps(refs, allow_nan=True))


def scan(path, **kw) -> dict[str, Any]:
    """refindex.scan, then a JSON round trip (the index must be plain JSON)."""
    return json_roundtrip(refindex.scan(str(path), **kw))


def scan_open(path, **kw) -> tuple[dict[str, Any], zarr.Group]:
    refs = scan(path, **kw)
    return refs, consumer_open(refs)


def zvalues(z) -> np.ndarray:
    """All values of a zarr array as numpy; vlen-utf8 (StringDType) as an object array of str."""
    v = np.asarray(z[...])
    if v.dtype.kind == "T":
        v = v.astype(object)
    return v


def zattrs(z) -> dict[str, Any]:
    return dict(z.attrs)


def assert_same_values(h: np.ndarray, z: np.ndarray) -> None:
    """Exact equality of h5py values ``h`` and zarr values ``z`` (NaNs equal, byte exact)."""
    h = np.asarray(h)
    z = np.asarray(z)
    assert z.shape == h.shape, f"shape {z.shape} != {h.shape}"
    if h.dtype.names is not None:
        assert z.dtype.names is not None, f"zarr dtype {z.dtype} is not structured"
        for name in h.dtype.names:
            assert name in z.dtype.names, f"field {name!r} missing from {z.dtype}"
            hf = h[name]
            zf = z[name]
            sub = h.dtype.fields[name][0]
            if sub.subdtype is not None and zf.dtype.names is not None:
                # array member -> nested record with fields "0", "1", ...
                n = int(np.prod(sub.subdtype[1]))
                assert list(zf.dtype.names) == [str(i) for i in range(n)], zf.dtype
                zf = np.stack([zf[str(i)] for i in range(n)], axis=-1).reshape(hf.shape)
            assert_same_values(hf, zf)
        return
    if h.dtype.kind in "fc":
        assert z.dtype.kind == h.dtype.kind and z.dtype.itemsize == h.dtype.itemsize, (z.dtype, h.dtype)
        np.testing.assert_array_equal(z, h)  # NaN == NaN here
        # byte-exact too (signed zeros, NaN payloads)
        assert z.astype(h.dtype.newbyteorder("=")).tobytes() == h.astype(h.dtype.newbyteorder("=")).tobytes()
        return
    if h.dtype.kind in "iub":
        assert z.dtype.kind == h.dtype.kind and z.dtype.itemsize == h.dtype.itemsize, (z.dtype, h.dtype)
        np.testing.assert_array_equal(z, h)
        return
    if h.dtype.kind in "SV":
        assert z.dtype == h.dtype, (z.dtype, h.dtype)
        assert z.tobytes() == h.tobytes()
        return
    if h.dtype.kind == "O":
        assert z.dtype.kind in "OTU", z.dtype
        hl = [v.decode("utf-8") if isinstance(v, bytes) else v for v in h.reshape(-1)]
        zl = [str(v) for v in z.reshape(-1)]
        assert zl == hl
        return
    raise AssertionError(f"no comparison for dtype {h.dtype}")


def resolve_url(refs: dict[str, Any], url: str) -> str:
    for name, value in (refs.get("templates") or {}).items():
        url = url.replace("{{" + name + "}}", value)
    return url


def assert_chunk_referenced(refs, key: str, url: str, offset: int, size: int) -> None:
    """``key`` is a reference [url, offset, size] into ``url`` (data not copied)."""
    value = refs["refs"].get(key)
    assert isinstance(value, list), f"{key} is not a reference: {str(value)[:80]!r}"
    assert len(value) == 3, value
    assert resolve_url(refs, value[0]) == str(url)
    assert (value[1], value[2]) == (offset, size), f"{key}: {value[1:]} != {(offset, size)}"


def assert_chunks_referenced(refs, prefix: str, d: h5py.Dataset, url) -> int:
    """Every allocated chunk of chunked dataset ``d`` is referenced at its HDF5 byte range."""
    chunks = d.chunks
    n = 0
    for i in range(d.id.get_num_chunks()):
        info = d.id.get_chunk_info(i)
        key = ".".join(str(o // c) for o, c in zip(info.chunk_offset, chunks))
        assert info.filter_mask == 0
        assert_chunk_referenced(refs, f"{prefix}/{key}", url, info.byte_offset, info.size)
        n += 1
    assert n > 0
    return n


def dataset_names(f: h5py.Group) -> list[str]:
    """Every dataset's path under ``f`` (each object once, as ``visititems`` names it), collected before
    anything is read: no zarr or fsspec read may run inside h5py's visit callbacks (see h5guard)."""
    names: list[str] = []
    f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    return names


def pytest_configure(config):
    import h5guard

    h5guard.install()


@pytest.fixture
def h5path(tmp_path):
    return tmp_path / "data.h5"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_s3(key: str = "testing", secret: str = "testing") -> Iterator[dict[str, Any]]:
    """A real S3 endpoint (moto's server) on 127.0.0.1; yields the storage options s3fs needs.

    moto keeps one backend per process, so modules sharing a process use distinct buckets.
    """
    moto_server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        yield {"endpoint_url": f"http://127.0.0.1:{port}", "key": key, "secret": secret, "anon": False}
    finally:
        server.stop()


class MotoRequests(logging.Handler):
    """The requests moto's server answered, from werkzeug's access log: ``'METHOD /path HTTP/1.1'`` each
    (the colours werkzeug gives some statuses stripped)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = re.sub(r"\x1b\[[0-9;]*m", "", record.getMessage())
        if '"' in text:
            self.lines.append(text.split('"')[1])

    def of(self, method: str, fragment: str = "") -> list[str]:
        return [line for line in self.lines if line.startswith(method + " ") and fragment in line]


@contextlib.contextmanager
def moto_requests() -> Iterator[MotoRequests]:
    """Inside :func:`moto_s3`: the requests its server answers meanwhile."""
    log = logging.getLogger("werkzeug")
    seen, level = MotoRequests(), log.level
    log.addHandler(seen)
    log.setLevel(logging.INFO)
    try:
        yield seen
    finally:
        log.removeHandler(seen)
        log.setLevel(level)


def collect_garbage() -> None:
    """Collect garbage now, in this (the main) thread; what survives is frozen out of later collections.

    A full collection walks every object the process holds: after some hundred tests that is
    seconds per call, and the modules that collect after each test (Icechunk, hdmf-zarr ios)
    spent more time there than in their tests. Frozen survivors (``gc.freeze``) are still freed
    by reference counting; only cycles among them are never collected again, which also keeps
    their finalizers off zarr's loop thread.
    """
    gc.collect()
    gc.freeze()


@pytest.fixture
def collect_in_main_thread():
    """Collect garbage in the main thread after the test (autouse it in modules that make Icechunk objects).

    Icechunk's repositories and sessions are Rust objects whose release may block; collected by a
    garbage collection that happens to run in zarr's event-loop thread, one made a later test hang
    there (once, in a full run: the loop thread stuck allocating). Dropping them here, between tests,
    keeps that away from every later test.
    """
    yield
    collect_garbage()


# How the suite spreads over xdist workers (the Makefile's ``--dist loadgroup``).  A module's tests
# stay together on one worker (module fixtures made once, tallies such as test_v3's counting every
# test), except the modules below, whose tests share no state: they are handed out one by one and
# fill the end of the run.  Modules with the longest tests go first, so no worker is left with one
# of them at the end.  (xdist's own loadgroup cannot do this under pytest 9: it renames items
# through an attribute pytest no longer reads, and every test was handed out alone.)
SPREAD_MODULES = {"test_corpus.py", "test_stock_readers.py", "test_icechunk.py", "test_schema.py", "test_xarray.py",
                  "test_virtualizarr.py"}
LONGEST_FIRST = ["test_split_walk.py", "test_docs.py", "test_v3.py", "test_fuzz.py",
                 "test_xarray.py"]


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadgroup":
        return None  # xdist's own scheduler

    from xdist.scheduler import LoadScopeScheduling

    class ModulesAndSpreadTests(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return nodeid if module.rsplit("/", 1)[-1] in SPREAD_MODULES else module

    return ModulesAndSpreadTests(config, log)


def pytest_collection_modifyitems(config, items):
    """Modules in LONGEST_FIRST order, then the rest as collected (the order within a module kept)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_collection_finish(session):
    """What collection made (test modules, parameters, items) lives all session: out of the collector's way."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def nwb_files(tmp_path_factory):
    """Every NWB test file, built once per session: ``{name: path}``.

    The pynwb files of tests/nwbfiles.py (main, base, linking, hardlink) and the files written
    the way other NWB writers write them, of tests/nwbwriters.py (aqnwb, mies, matnwb,
    neuroconv; neuroconv_ttl, a real NeuroConv file).  Old pynwb versions' own files are in the corpus (``pynwb/``).
    """
    pytest.importorskip("pynwb")
    import warnings

    import nwbfiles
    import nwbwriters

    folder = tmp_path_factory.mktemp("nwb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return nwbfiles.build_all(folder) | nwbwriters.build_all(folder)
