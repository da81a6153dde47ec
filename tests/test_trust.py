"""Trust and failure (issue 20): a changed source is never read through an old index, failures say
what went wrong in the user's words, a killed command leaves nothing behind, the suite cannot hang."""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest

import h5guard
import refindex
import refindex.pipeline
import webserver
from waiting import until
import refindex.source._failures
from conftest import consumer_open, free_port, moto_s3, scan
from refindex.cli import main as cli_main
from refindex.errors import RefindexError, SourceError, StaleIndexError


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


# ------------------------------------------------------------------ messages in the user's words
def _wide(path, n=1 << 19):
    """A plain file of 2 MiB (one contiguous dataset): beyond the first read of a remote scan."""
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(n, dtype="<i4"))
    return path


def test_a_server_that_ignores_range_requests(tmp_path, monkeypatch):
    """Before: 'short read at 0: got 12752773 of 1048576 bytes'.  Now a small file is read whole
    (scan and chunk reads alike); a large one is refused naming the cause."""
    path = _wide(tmp_path / "wide.h5")
    with webserver.serve(ranges=False) as server:
        url = server.put("wide.h5", path.read_bytes())
        refs = refindex.scan(url, inline_dataset_threshold=0)
        assert np.array_equal(refindex.open(refs)["x"][:], np.arange(1 << 19, dtype="<i4"))
        monkeypatch.setattr(refindex.source._failures, "WHOLE_FILE_FALLBACK", 1 << 20)
        with pytest.raises(SourceError) as e:
            refindex.scan(url)
    assert str(e.value) == (
        f"{url}: the server does not support range requests (asked for bytes 0-1048576, it sent "
        f"{path.stat().st_size} bytes): refindex reads remote files in ranges; files over 1 MiB need a server "
        "that supports them (nginx, Apache, S3 and most object stores do), or copy the file here and index the copy")


def test_connection_refused_says_it_cannot_connect(monkeypatch, capsys):
    """Before: 'http://127.0.0.1:1/x.nwb: file not found'."""
    monkeypatch.setattr(refindex.source.retry_policy, "backoff", 0.01)
    port = free_port()
    url = f"http://127.0.0.1:{port}/x.nwb"
    with pytest.raises(SourceError) as e:
        refindex.scan(url)
    assert str(e.value) == (f"{url}: cannot connect to 127.0.0.1:{port} (connection refused): "
                            "is the server running and the URL right?")
    assert cli_main(["scan", url, "--no-isolate"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"refindex: error: {e.value}"]


def _nwb_like(path):
    """The root attributes of an NWB file and an acquisition series of a few chunks: what opening it
    looks at before hdmf reads anything (an NWB file written by pynwb takes seconds to build)."""
    with h5py.File(path, "w") as f:
        f.attrs.update({"neurodata_type": "NWBFile", "namespace": "core", "nwb_version": "2.7.0"})
        series = f.create_group("acquisition/series")
        series.attrs.update({"neurodata_type": "TimeSeries", "namespace": "core"})
        series.create_dataset("data", data=np.arange(40000, dtype="<f4"), chunks=(10000,))
    return path


def _refindex_tasks_ended() -> bool:
    """Whether no task running refindex's code (the read-ahead's fetches) is left unfinished on zarr's
    or fsspec's event loop; what ended is collected (an exception nobody retrieved is reported then)."""
    import asyncio

    import fsspec.asyn
    import zarr.core.sync

    root = os.path.dirname(refindex.__file__)
    loops = {zarr.core.sync.loop[0], fsspec.asyn.get_loop()} - {None}
    code = [getattr(t.get_coro(), "cr_code", None) for loop in loops for t in asyncio.all_tasks(loop)]
    gc.collect()
    return not [c for c in code if c is not None and c.co_filename.startswith(root)]


def test_s3_index_without_credentials_hints_remote_options(s3, tmp_path, monkeypatch, caplog):
    """Before: 'could not stat file: Unable to locate credentials', then two 'Task exception was
    never retrieved' tracebacks from the read-ahead of open_nwb."""
    opts, fs = s3
    fs.put(str(_nwb_like(tmp_path / "session.nwb")), "trust/session.nwb")
    refs = refindex.scan("s3://trust/session.nwb", storage_options=opts)
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookup of credentials
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    caplog.set_level(logging.ERROR, logger="asyncio")
    # open_nwb's zarr road is the one with the read-ahead those tracebacks came from; its default road is h5py's
    for opened in (refindex.open, refindex.open_nwb, functools.partial(refindex.open_nwb, reader="zarr")):
        with pytest.raises(SourceError) as e:
            opened(refs)
        assert str(e.value).startswith("s3://trust/session.nwb: no S3 credentials found (Unable to locate "
                                       "credentials): pass remote_options (reading an index: the files its chunks "
                                       "live in) or storage_options")
    assert until(_refindex_tasks_ended)  # then collected: nothing reported about them
    assert "never retrieved" not in caplog.text


def _read_only_folder(tmp_path):
    """A folder no file can be made in (as root, permissions do not stop writes: sysfs does)."""
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    folder = Path("/sys/kernel")
    try:
        fd, probe = tempfile.mkstemp(dir=folder)
    except OSError:
        return folder
    os.close(fd)
    os.unlink(probe)
    pytest.skip("no read-only folder here")


def test_an_output_that_cannot_be_written_is_named(tmp_path, capsys):
    """Before: 'in.h5: PermissionError: [Errno 13] Permission denied: 'ro/.refindex-10635-6s0oaw2i.tmp''
    (the input blamed, a temporary file named), and in batch 'internal error' with the results lost."""
    src = _two(tmp_path / "in.h5")
    ro = _read_only_folder(tmp_path)
    assert cli_main(["scan", str(src), "-o", f"{ro}/in.refs.json"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"refindex: error: {ro}/in.refs.json: cannot write the index: permission denied (a read-only folder?): "
        "choose another output"]
    assert cli_main(["batch", str(src), "-o", f"{ro}/", "--workers", "0", "--no-progress"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"failed {src}: {ro}/in.h5.refs.json: cannot write the index: permission denied (a read-only "
                      "folder?): choose another output")
    assert err[1].startswith("1 inputs: 0 indexed, 0 up to date, 1 failed") and err[1].endswith("; no manifest written")
    assert err[2].startswith(f"refindex: error: {ro}/refindex-manifest.jsonl: cannot write the manifest: permission "
                             "denied") and len(err) == 3
    report = refindex.run_batch([str(src), str(_two(tmp_path / "other.h5"))], workers=0, progress=False,
                                manifest=f"{ro}/m.jsonl")
    assert [r.status for r in report.results] == ["indexed", "indexed"] and not report.ok  # results kept
    assert report.manifest is None and report.manifest_error.startswith(f"{ro}/m.jsonl: cannot write the manifest")


def test_open_nwb_on_a_file_that_is_not_nwb(tmp_path):
    """Before: hdmf's 'ValueError: No data_type found for builder root' and warnings, and the useless
    index made on the fly was cached."""
    import warnings

    nc = tmp_path / "climate.nc"
    with h5py.File(nc, "w") as f:
        f.create_dataset("t", data=np.arange(10.0))
    cache = tmp_path / "cache"
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        with pytest.raises(RefindexError) as e:
            refindex.open_nwb(str(nc), cache=cache)
    assert str(e.value) == (f"{nc}: not an NWB file: its root group has no neurodata_type or namespace attribute "
                            "(every NWB file has them); read it with refindex.open (zarr) or xarray instead")
    assert warned == [] and not list(cache.glob("*"))  # nothing cached
    with pytest.raises(RefindexError, match="not an NWB file"):
        refindex.open_nwb(refindex.scan(str(nc)))  # an index of it alike
    assert refindex.open(str(nc), cache=cache)["t"][3] == 3.0  # refindex.open is the way, and caches it


def test_batch_expands_folders_and_prefixes(tmp_path, s3):
    """Before: 'some/folder: is a directory', 's3://bucket/raw/: not an HDF5 file: it is empty'."""
    folder = tmp_path / "some" / "folder"
    (folder / "deeper").mkdir(parents=True)
    _two(folder / "one.h5")
    _two(folder / "deeper" / "two.nwb")
    (folder / "README.txt").write_text("not HDF5")
    report = refindex.run_batch(str(folder), workers=0, progress=False)
    assert sorted(os.path.relpath(r.source, folder) for r in report.indexed) == ["deeper/two.nwb", "one.h5"]
    report = refindex.run_batch(str(folder), workers=0, progress=False)  # the indexes beside them are left out
    assert len(report.up_to_date) == 2 and not report.indexed
    opts, fs = s3
    fs.put(str(folder / "one.h5"), "trust/raw/one.h5")
    fs.put(str(folder / "deeper" / "two.nwb"), "trust/raw/deeper/two.nwb")
    report = refindex.run_batch("s3://trust/raw/", storage_options=opts, output=str(tmp_path / "idx"), workers=0,
                                progress=False)
    assert sorted(r.source for r in report.indexed) == ["s3://trust/raw/deeper/two.nwb", "s3://trust/raw/one.h5"]
    assert np.array_equal(refindex.open(str(tmp_path / "idx" / "one.h5.refs.json"), remote_options=opts)["b"][:],
                          np.arange(100, 200))


# ------------------------------------------------------------------ processes
def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_kill_9_of_refindex_scan_leaves_no_worker_and_no_output(tmp_path):
    """Before: the forked worker lived on and wrote the output ~10 s after its parent was killed."""
    src = _two(tmp_path / "slow.h5")
    out = tmp_path / "slow.refs.json"
    with webserver.serve(delay=1.0) as server:  # every answer takes a second: the worker waits on it
        url = server.put("slow.h5", src.read_bytes())
        code = "import sys; from refindex.cli import main; sys.exit(main(sys.argv[1:]))"
        parent = subprocess.Popen([sys.executable, "-c", code, "scan", url, "-o", str(out)], cwd=tmp_path,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert until(lambda: _children(parent.pid) and server.requests, 60), "the worker never asked the server"
            workers = _children(parent.pid)
        finally:
            parent.kill()
            parent.wait()
        assert until(lambda: not any(_alive(w) for w in workers)), "the worker outlived its parent"
        assert until(lambda: server.inflight == 0, 10)  # what the server still answers reaches nobody
    assert not out.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".refindex-")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_killed_with_its_parent_takes_its_partial_output_along(tmp_path):
    out = tmp_path / "x.refs.json"
    code = ("import sys\nfrom argparse import Namespace\nfrom refindex import cli\nfrom refindex.isolation import forked\n"
            "from refindex.testing.jobs import hang_while_writing\n"
            "assert forked.can_fork()\n"
            "cli.isolated(hang_while_writing, {'source': 'x.h5', 'output': sys.argv[1]}, Namespace(timeout=600), "
            "sys.argv[1])\n")
    parent = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        assert until(lambda: [n for n in os.listdir(tmp_path) if n.startswith(".refindex-")], 60)
        workers = _children(parent.pid)
    finally:
        parent.kill()
        parent.wait()
    assert workers and until(lambda: not any(_alive(w) for w in workers))
    assert until(lambda: not os.listdir(tmp_path)), os.listdir(tmp_path)  # the half-written file went too


@pytest.mark.parametrize("fmt", ["json", "icechunk"])
def test_batch_rerun_rescans_a_rewrite_and_not_a_same_bytes_copy(pair, tmp_path, fmt):
    """A batch re-run by the freshness check every reader uses: a file copied over by the same bytes
    (a new mtime) stays up to date; one rewritten at the same size with places swapped is indexed again."""
    original, swapped = pair
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("same.h5", "rewritten.h5"):
        (folder / name).write_bytes(original)
    kw = dict(workers=0, progress=False) | ({"format": "icechunk", "output": str(tmp_path / "repo")}
                                           if fmt == "icechunk" else {})
    assert len(refindex.run_batch(str(folder), **kw).indexed) == 2
    (folder / "same.h5").write_bytes(original)
    os.utime(folder / "same.h5", (1_800_000_000.5, 1_800_000_000.5))
    (folder / "rewritten.h5").write_bytes(swapped)
    os.utime(folder / "rewritten.h5", (1_800_000_000.5, 1_800_000_000.5))
    report = refindex.run_batch(str(folder), **kw)
    assert [os.path.basename(r.source) for r in report.indexed] == ["rewritten.h5"]
    assert [os.path.basename(r.source) for r in report.up_to_date] == ["same.h5"]
    if fmt == "json":
        assert np.array_equal(refindex.open(str(folder / "rewritten.h5.refs.json"))["a"][:], A_VALUES)
    else:
        group = next(r.group for r in report.indexed)
        assert np.array_equal(refindex.open(str(tmp_path / "repo"), group=group)["a"][:], A_VALUES)
