"""The h5py road on the fly for a small remote file of many objects (refindex.read.h5py_road._beside).

The scan's first round trips fetch such a file whole; ``h5py_file`` then serves libhdf5 from
those bytes at once, and the index (for the local cache) is made by a forked child it never
waits for.  What a consumer sees must not change: h5py sees the file as it sees the file
itself, the cached index is the one a scan makes, links into other files and virtual datasets
reading other files are told (and refused) as the index's road tells them, and nothing the
caller reads depends on the child.  The threshold of objects is lowered here so that small
test files take that road.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

import refindex
from refindex.read.h5py_road import _beside

from h5compare import assert_same_h5  # noqa: E402
import webserver
from waiting import until

pytestmark = pytest.mark.timeout(240)


def _many_objects(path: Path, n: int = 60) -> None:
    rng = np.random.default_rng(1)
    with h5py.File(path, "w") as f:
        for i in range(n):
            g = f.create_group(f"series_{i:03d}")
            g.attrs["neurodata_type"] = "TimeSeries"
            g.attrs["rate"] = float(i)
            g.create_dataset("data", data=rng.normal(size=500), chunks=(100,), compression="gzip")
            g["data"].attrs["unit"] = "volts"
            g.create_dataset("timestamps", data=np.arange(500.0) / (i + 1))
        f.create_dataset("names", data=["a", "bb", "ccc"], dtype=h5py.string_dtype())
        f.create_dataset("refs", data=[f["series_000"].ref, f["series_001/data"].ref], dtype=h5py.ref_dtype)


def _entry(cache: Path, seconds: float = 60, pattern: str = "*.refs.json") -> Path:
    """The cache entry the child writes (waited for); ``pattern``: what else it leaves."""
    found: list[Path] = []
    if not until(lambda: found.extend(cache.glob(pattern) if cache.is_dir() else []) or found, seconds):
        raise AssertionError(f"no {pattern} in {cache} after {seconds} s")
    return found[0]


@pytest.fixture
def many(tmp_path, monkeypatch):
    monkeypatch.setattr(_beside, "MIN_OBJECTS", 50)
    path = tmp_path / "many.h5"
    _many_objects(path)
    with webserver.serve() as server:
        yield path, server, server.put("many.h5", path.read_bytes())


def test_a_file_fetched_whole_opens_over_its_bytes_and_is_indexed_beside(many, tmp_path, monkeypatch):
    path, server, url = many
    forks = []
    real = _beside.index_beside
    monkeypatch.setattr(_beside, "index_beside", lambda *a: forks.append(a) or real(*a))
    f = refindex.h5py_file(url, cache=False)  # no cache: nothing to make beside, no child
    try:
        assert f.refindex_file.pages.nbytes == path.stat().st_size  # served from the file's bytes
        asked = len(server.requests)
        with h5py.File(path, "r") as local:
            assert assert_same_h5(local, f) >= 182
        assert f.refindex_file.stats.from_source == 0 and len(server.requests) == asked  # nothing more asked
    finally:
        f.close()
    assert forks == []

    cache = tmp_path / "cache"
    f = refindex.h5py_file(url, cache=cache)
    try:
        assert len(forks) == 1 and f.refindex_file.pages.nbytes == path.stat().st_size
        with h5py.File(path, "r") as local:
            assert assert_same_h5(local, f) >= 182
    finally:
        f.close()
    cached = json.loads(_entry(cache).read_text())
    assert cached == json.loads(json.dumps(refindex.scan(url)))  # the index a scan of the file makes

    asked = len(server.requests)
    f = refindex.h5py_file(url, cache=cache)  # from the cache now: its pages, after a freshness check
    try:
        assert len(forks) == 1 and len(server.requests) - asked <= 2
        assert f.refindex_file.pages.nbytes < path.stat().st_size
        with h5py.File(path, "r") as local:
            assert assert_same_h5(local, f) >= 182
    finally:
        f.close()


def test_a_cache_the_child_cannot_write_to_changes_nothing_the_caller_reads(many, tmp_path, monkeypatch):
    path, server, url = many
    children = []
    real = _beside.index_beside
    monkeypatch.setattr(_beside, "index_beside", lambda *a: children.append(real(*a)) or children[-1])
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    f = refindex.h5py_file(url, cache=blocked / "cache")
    try:
        with h5py.File(path, "r") as local:
            assert assert_same_h5(local, f) >= 182
    finally:
        f.close()
    assert len(children) == 1 and children[0] is not None
    assert until(lambda: not Path(f"/proc/{children[0]}").exists(), 60)  # ended, and reaped
    assert not (blocked / "cache").exists()


def _held_child(monkeypatch, gate: Path) -> None:
    """The child waits until ``gate`` exists before it writes (it is a fork: what is patched here, it
    runs): the test says when, after what it looks at happened (at most a minute)."""
    real = _beside.keep_in_cache

    def held(*args):
        until(gate.exists, 60)
        return real(*args)

    monkeypatch.setattr(_beside, "keep_in_cache", held)


def test_the_child_outlives_the_thread_that_opened(many, tmp_path, monkeypatch):
    """A pool's worker thread opens and ends at once: the index is still made (Linux's parent-death
    signal is tied to the thread that forked, which would kill the child with it)."""
    import threading

    path, server, url = many
    gate = tmp_path / "gate"
    _held_child(monkeypatch, gate)
    cache = tmp_path / "cache"
    read = {}

    def worker():
        with refindex.h5py_file(url, cache=cache) as f:
            read["n"] = int(f["series_007/data"].shape[0])

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert read == {"n": 500} and not list(cache.glob("*.refs.json"))  # the thread is gone, the child is not
    gate.touch()
    assert json.loads(_entry(cache).read_text()) == json.loads(json.dumps(refindex.scan(url)))


def test_the_child_ends_with_the_process_that_opened(many, tmp_path, monkeypatch):
    import os

    path, server, url = many
    _held_child(monkeypatch, tmp_path / "gate")  # never opened: the child would write after a minute
    cache = tmp_path / "cache"
    r, w = os.pipe()
    opener = os.fork()
    if opener == 0:  # a user's script: opens, reads, exits at once
        code = 1
        try:
            monkeypatch.setattr(_beside, "index_beside", lambda *a, real=_beside.index_beside:
                                os.write(w, str(real(*a)).encode()) and None)
            with refindex.h5py_file(url, cache=cache) as f:
                code = 0 if f["series_001/data"].shape == (500,) else 2
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as told:
        child = int(told.read())
    _, status = os.waitpid(opener, 0)
    assert os.waitstatus_to_exitcode(status) == 0

    def running() -> bool:
        try:
            return Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    assert until(lambda: not running(), 10)  # ended with the process, before it could write
    assert not cache.exists() or not list(cache.glob("*.refs.json"))


def test_a_script_that_exits_at_once_leaves_its_cache_entry(tmp_path):
    """Before: a script that opened a URL and ended at once left no cache entry (the child making it
    ended with it), so every run scanned again.  Now its end waits for the child (bounded): the entry
    is there when the script has ended, and the next open takes it after one freshness check."""
    import subprocess
    import sys

    path = tmp_path / "many.h5"
    _many_objects(path)
    cache = tmp_path / "cache"
    script = ("import sys, refindex\n"
              "from refindex.read.h5py_road import _beside\n"
              "_beside.EXIT_WAIT = 200  # (the default bound is policy; here the child may be slow, the machine busy)\n"
              "f = refindex.h5py_file(sys.argv[1], cache=sys.argv[2])\n"
              "print(f['series_001/data'].shape)\n")
    with webserver.serve() as server:
        url = server.put("many.h5", path.read_bytes())
        ran = subprocess.run([sys.executable, "-c", script, url, str(cache)], capture_output=True, text=True,
                             timeout=230)
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, "(500,)\n", "")
        entries = list(cache.glob("*.refs.json"))  # there when the script has ended: not waited for here
        assert len(entries) == 1
        assert json.loads(entries[0].read_text()) == json.loads(json.dumps(refindex.scan(url)))
        server.requests.clear()
        with refindex.h5py_file(url, cache=cache) as f, h5py.File(path, "r") as local:
            assert server.requests == [("HEAD", "/many.h5", None)]  # the freshness check: no scan
            assert assert_same_h5(local, f) >= 182


def test_what_h5py_cannot_follow_is_told_as_the_index_tells_it(tmp_path, monkeypatch):
    """Links into other files and virtual datasets with sources in other files, which h5py's file-object
    driver cannot open: the same warnings as the road over the file's index, and a followed external
    link fails loudly."""
    monkeypatch.setattr(_beside, "MIN_OBJECTS", 50)
    path = tmp_path / "reaching.h5"
    _many_objects(path)
    source = tmp_path / "source.h5"
    with h5py.File(source, "w") as s:
        s["x"] = np.arange(10)
    with h5py.File(path, "a") as f:
        f["series_003/elsewhere"] = h5py.ExternalLink("other.h5", "/x")
        layout = h5py.VirtualLayout(shape=(10,), dtype="i8")
        layout[:] = h5py.VirtualSource("source.h5", "x", shape=(10,))
        f["series_004"].create_virtual_dataset("virtual", layout, fillvalue=-1)
    with webserver.serve() as server:
        server.put("source.h5", source.read_bytes())
        url = server.put("reaching.h5", path.read_bytes())

        def opened(target):
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                f = refindex.h5py_file(target, cache=False)
            return f, sorted(str(w.message) for w in seen if issubclass(w.category, refindex.RefindexWarning))

        road, told = opened(json.loads(json.dumps(refindex.scan(url))))
        road.close()
        f, beside_told = opened(url)
        try:
            assert f.refindex_file.pages.nbytes == path.stat().st_size  # the file's bytes: no index
            assert beside_told == told and len(told) == 2
            assert "external link" in told[0] + told[1] and "/series_004/virtual" in told[0] + told[1]
            with pytest.raises(Exception, match="cannot follow an external link"):
                f["series_003/elsewhere"]
            assert f["series_002/data"][:].tolist() == h5py.File(path, "r")["series_002/data"][:].tolist()
        finally:
            f.close()


def test_open_nwb_reads_a_file_fetched_whole_as_pynwb_reads_the_file(nwb_files, tmp_path, monkeypatch):
    """open_nwb's default reader on such a file: NWBHDF5IO over its bytes, equal to NWBHDF5IO on the file,
    its index made beside; a file that is no NWB file is refused before anything is cached or forked;
    a file linking into other files is indexed here, for the zarr road that follows the links."""
    import nwbcompare
    import pynwb

    monkeypatch.setattr(_beside, "MIN_OBJECTS", 10)
    forks = []
    real = _beside.index_beside
    monkeypatch.setattr(_beside, "index_beside", lambda *a: forks.append(a) or real(*a))
    plain = tmp_path / "plain.h5"
    _many_objects(plain)
    cache = tmp_path / "cache"
    with webserver.serve() as server:
        for name in ("main", "linking", "base"):
            server.put(f"{name}.nwb", Path(nwb_files[name]).read_bytes())
        with pynwb.NWBHDF5IO(str(nwb_files["main"]), "r") as io:
            want = io.read()
            got = refindex.open_nwb(server.url("main.nwb"), cache=cache)
            try:
                assert type(got.refindex_io).__name__ == "NWBHDF5IO" and len(forks) == 1
                assert got.refindex_io._file.refindex_file.pages.nbytes == Path(nwb_files["main"]).stat().st_size
                assert nwbcompare.assert_same_nwb(want, got) > 10
            finally:
                got.refindex_io.close()
        _entry(cache)

        with pytest.raises(refindex.RefindexError, match="not an NWB file"):
            refindex.open_nwb(server.put("plain.h5", plain.read_bytes()), cache=tmp_path / "plain-cache")
        assert len(forks) == 1 and not (tmp_path / "plain-cache").exists()

        with pynwb.NWBHDF5IO(str(nwb_files["linking"]), "r") as io:
            want = io.read()
            got = refindex.open_nwb(server.url("linking.nwb"), cache=False)
            assert type(got.refindex_io).__name__ != "NWBHDF5IO" and len(forks) == 1  # the zarr road: indexed here
            assert nwbcompare.assert_same_nwb(want, got) > 10
            got.refindex_io.close()


def test_an_open_makes_no_index_it_would_wait_for(tmp_path, monkeypatch):
    """``cache=False`` on a file the prefetch does not fetch whole: no index is made (nothing would keep
    it); libhdf5 reads the bytes the prefetch brought, the rest by range requests, and the chunk tables
    alone steer the reads ahead.  h5py sees the file as it sees the file itself; a whole dataset of 48
    chunks comes in a few round trips; with a cache the open is the same, and a forked child makes the
    index a scan makes from the bytes in memory."""
    from refindex import pipeline

    rng = np.random.default_rng(5)
    path = tmp_path / "session.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("acquisition/data", data=rng.normal(size=(48 * 4096, 16)), chunks=(4096, 16))
        for i in range(8):
            f[f"processing/module_{i}/values"] = np.arange(i + 3)
            f[f"processing/module_{i}"].attrs["description"] = f"module {i}"
    made = []
    real = pipeline.OpenedScan.refs
    monkeypatch.setattr(pipeline.OpenedScan, "refs", lambda self, **kw: made.append(self) or real(self, **kw))
    with webserver.serve() as server:
        url = server.put("session.h5", path.read_bytes())
        f = refindex.h5py_file(url, cache=False)
        try:
            assert made == [] and f.refindex_file.pages.nbytes < path.stat().st_size / 4
            with h5py.File(path, "r") as local:
                assert assert_same_h5(local, f) >= 19
                before = f.refindex_file.stats.fetch.round_trips
                np.testing.assert_array_equal(f["acquisition/data"][:], local["acquisition/data"][:])
            s = f.refindex_file.stats
            assert s.from_ahead >= 40 and s.fetch.round_trips - before <= 8, s.as_dict()
        finally:
            f.close()
        cache = tmp_path / "cache"
        with refindex.h5py_file(url, cache=cache) as f, h5py.File(path, "r") as local:
            assert made == []  # opened at once here too, its index made beside by a child
            assert assert_same_h5(local, f) >= 19
        assert json.loads(_entry(cache).read_text()) == json.loads(json.dumps(refindex.scan(url)))


def _far(path: Path) -> Path:
    """A file whose scan needs values lying far from any metadata (written after a large dataset)."""
    rng = np.random.default_rng(2)
    with h5py.File(path, "w") as f:
        f.create_dataset("labels", shape=(6,), dtype="i8")  # its header now, its values where they are written
        f.create_dataset("first", data=rng.normal(size=(2_000_000,)))
        f["labels"][:] = np.arange(6)
        f.create_dataset("second", data=rng.normal(size=(2_000_000,)))
    return path


def test_a_file_whose_index_needs_more_than_the_open_fetched_is_indexed_here_next_time(tmp_path):
    """The child making the index beside reads only the bytes in memory; a scan that needs values lying
    far from any metadata (written after a large dataset) cannot be made there: nothing is cached, that
    is remembered, and the next open scans in its process and keeps the index.  Every open reads as h5py."""
    path = _far(tmp_path / "far.h5")
    cache = tmp_path / "cache"
    with webserver.serve() as server:
        url = server.put("far.h5", path.read_bytes())
        with refindex.h5py_file(url, cache=cache) as f, h5py.File(path, "r") as local:
            assert assert_same_h5(local, f) >= 3
        assert _entry(cache, pattern="*.scan-here").name.endswith(".refs.json.scan-here")
        assert len(list(cache.iterdir())) == 1
        with refindex.h5py_file(url, cache=cache) as f, h5py.File(path, "r") as local:
            assert assert_same_h5(local, f) >= 3
        [entry] = list(cache.iterdir())  # scanned here: kept, and no longer remembered
        assert entry.name.endswith(".refs.json")
        assert json.loads(entry.read_text()) == json.loads(json.dumps(refindex.scan(url)))


def test_a_mark_the_cache_will_not_let_go_changes_nothing_the_caller_reads(tmp_path):
    """The open that scans because a child left :func:`_beside.scan_here` removes the mark once the index is
    kept; a cache that refuses that (made read-only since; here the mark is a folder with a file in it)
    still gives the open its file, read as h5py reads it, and the index is kept."""
    path = _far(tmp_path / "far.h5")
    cache = tmp_path / "cache"
    with webserver.serve() as server:
        url = server.put("far.h5", path.read_bytes())
        with refindex.h5py_file(url, cache=cache) as f:
            pass
        mark = _entry(cache, pattern="*.scan-here")
        mark.unlink()
        mark.mkdir()
        (mark / "kept").write_text("x")  # unlink() now fails with an OSError
        with refindex.h5py_file(url, cache=cache) as f, h5py.File(path, "r") as local:
            assert assert_same_h5(local, f) >= 3
        assert mark.is_dir()
        entry = mark.with_name(mark.name.removesuffix(".scan-here"))
        assert json.loads(entry.read_text()) == json.loads(json.dumps(refindex.scan(url)))


def test_a_child_whose_scan_absorbed_a_refused_fetch_keeps_no_index(tmp_path, monkeypatch):
    """A scan may absorb a read's error on its way (an attribute reported unreadable, a dimension named
    otherwise): in the child, a fetch its cache refused is such an error, and the index it then makes is
    not a scan's.  Nothing is cached, that is remembered, and the next open scans in its process."""
    from refindex import pipeline

    path = tmp_path / "big.h5"  # a file whose scan needs no byte beyond what the open fetched
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.random.default_rng(4).normal(size=(48 * 4096, 16)), chunks=(4096, 16))
        f.attrs["title"] = "chunks far from the metadata"
    real = pipeline.OpenedScan.refs
    parent = os.getpid()
    made: list = []

    def absorbing(self, **kw):
        if os.getpid() == parent:
            return real(self, **kw)
        try:  # the child: a read of bytes the open never fetched, its error swallowed
            self.src.cache.read_ranges([self.src.size // 2], [8])
        except Exception:  # noqa: BLE001 - as a scan's own fallbacks do
            pass
        return made[0]  # an index that looks complete

    monkeypatch.setattr(pipeline.OpenedScan, "refs", absorbing)
    cache = tmp_path / "cache"
    with webserver.serve() as server:
        url = server.put("big.h5", path.read_bytes())
        made.append(refindex.scan(url))
        with refindex.h5py_file(url, cache=cache) as f, h5py.File(path, "r") as local:
            assert assert_same_h5(local, f) >= 1
        assert _entry(cache, pattern="*.scan-here").name.endswith(".refs.json.scan-here")
        assert len(list(cache.iterdir())) == 1


class _CountedFolder:
    """A cache folder (os.PathLike) that counts how often its path is asked for: once per resolution of
    the ``cache=`` setting into a folder."""

    def __init__(self, path: Path) -> None:
        self.path, self.asked = path, 0

    def __fspath__(self) -> str:
        self.asked += 1
        return os.fspath(self.path)


def test_the_index_cache_setting_is_resolved_once_per_open(tmp_path):
    """``cache=`` is resolved into a folder once, where ``h5py_file``/``open_nwb`` start, and handed on to the
    steps that ask whether the cache holds the file, make its index and keep it (it was resolved three times
    on the h5py road on the fly).  The opens read as h5py, and the second one reads the kept entry."""
    path = tmp_path / "small.h5"
    _many_objects(path, n=5)
    with webserver.serve() as server:
        url = server.put("small.h5", path.read_bytes())
        for _ in range(2):  # scanned on the fly and kept; then read from the cache
            folder = _CountedFolder(tmp_path / "cache")
            with refindex.h5py_file(url, cache=folder) as f, h5py.File(path, "r") as local:
                assert assert_same_h5(local, f) >= 10
            assert folder.asked == 1
            _entry(tmp_path / "cache")  # made beside, by a child the open did not wait for
        folder = _CountedFolder(tmp_path / "cache")
        root = refindex.open(url, cache=folder)
        with h5py.File(path, "r") as local:
            np.testing.assert_array_equal(root["series_004/data"][:], local["series_004/data"][:])
        assert folder.asked == 1
