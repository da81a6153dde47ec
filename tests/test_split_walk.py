"""The walk of a remote file shared with a forked helper (refindex.scanner._split).

Remote files are stood in for by fsspec's in-memory filesystem, which goes through the
same block cache (h5py's "fileobj" driver) as s3:// or https://.  Whatever the helper
does, the index must be byte for byte the one a walk in one process makes.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import fsspec
import h5py
import numpy as np
import pytest

import refindex
from refindex.errors import RefindexError
from refindex.options import ScanOptions
from refindex.scanner import _pages, _split, _walk

from conftest import assert_same_values, consumer_open, json_roundtrip
from corpus import CORPUS, MISSING, manifest_rows
from waiting import until

GROUPS = 48


def to_memory(path) -> str:
    url = f"memory://refindex-split-{uuid.uuid4().hex}/{os.path.basename(path)}"
    fsspec.filesystem("memory").pipe_file(url, open(path, "rb").read())
    return url


def _many_groups(path, bad: bool = False) -> None:
    """Groups of every kind of member: attributes, layouts, strings, links, references."""
    rng = np.random.default_rng(5)
    with h5py.File(path, "w") as f:
        shared = f.create_dataset("shared", data=np.arange(10))
        for i in range(GROUPS):
            g = f.create_group(f"g{i:02d}")
            g.attrs["i"] = i
            g.attrs["object_id"] = f"id-{i}"
            g.attrs["names"] = np.array(["a", "bc"], dtype=h5py.string_dtype())
            g.create_dataset("data", data=rng.standard_normal((200, 3)), chunks=(50, 3), compression="gzip")
            g.create_dataset("contiguous", data=rng.integers(0, 100, (30, 7)))
            g.create_dataset("scalar", data=float(i))
            g.create_dataset("text", data=["x", "yy", "zzz"], dtype=h5py.string_dtype())
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            h5py.h5d.create(g.id, b"compact", h5py.h5t.STD_I32LE, h5py.h5s.create_simple((4,)), dcpl=dcpl).write(
                h5py.h5s.ALL, h5py.h5s.ALL, np.arange(4, dtype="<i4"))
            g["link_soft"] = h5py.SoftLink(f"/g{(i + 1) % GROUPS:02d}/data")
            g["link_hard"] = shared
            g["link_external"] = h5py.ExternalLink("elsewhere.h5", "/x")
            g.attrs["ref"] = f[f"g{max(0, i - 1):02d}"].ref if i else shared.ref
            sub = g.create_group("sub")
            sub.create_dataset("square", data=np.eye(4))
        if bad:  # in the last group: the helper's side of the walk
            f[f"g{GROUPS - 1:02d}"].create_dataset("a\\b", data=[1, 2])


def _scan(source: str, **kw) -> str:
    refs = refindex.scan(source, **kw)
    refs["refindex"].pop("created", None)
    return json.dumps(refs)


@pytest.fixture
def many(tmp_path):
    path = tmp_path / "many.h5"
    _many_groups(path)
    return path


def test_split_walk_is_the_one_process_walk(many, monkeypatch):
    url = to_memory(many)
    merged = []
    real = _split._merge
    monkeypatch.setattr(_split, "_merge", lambda ctx, path, payload: (merged.append(path), real(ctx, path, payload)))
    split = _scan(url, split_walk=True, url=str(many))  # references name the local copy
    assert merged, "the helper delivered no group"
    assert split == _scan(url, split_walk=False, url=str(many))  # byte for byte: content and order
    local = refindex.scan(str(many))
    refs = json.loads(split)
    refs["refindex"]["source"] = local["refindex"]["source"] = None
    local["refindex"].pop("created", None)
    assert refs == json_roundtrip(local)
    g = consumer_open(refs)
    with h5py.File(many, "r") as f:
        for name in (merged[0], "/g00", f"/g{GROUPS - 1:02d}/sub"):
            for key, d in list(f[name].items()):  # (iterating h5py's items() holds its lock: no zarr reads there)
                if isinstance(d, h5py.Dataset) and key != "link_external":
                    assert_same_values(d[()], g[f"{name.strip('/')}/{key}"][()])


def test_left_out_chunk_indexes_record_the_same_ranges_split_or_not(many, monkeypatch):
    """Every chunk index left out of the pages (its node ranges kept instead): what was read once for
    all of them (the superblock) must not be claimed by whichever index each process walked first."""
    monkeypatch.setattr(_pages, "INDEX_MAX", 0)
    url = to_memory(many)
    split = json.loads(_scan(url, split_walk=True))
    assert split == json.loads(_scan(url, split_walk=False))
    assert len(split["refindex"]["pages"]["index_ranges"]) == GROUPS  # every group's chunked data


def test_split_walk_by_default_for_remote_files_of_many_groups(many):
    assert _split.MIN_GROUPS < GROUPS
    url = to_memory(many)
    merged = []
    real = _split._merge
    _split._merge = lambda ctx, path, payload: (merged.append(path), real(ctx, path, payload))
    try:
        refindex.scan(url)
        default_merged = len(merged)
        refindex.scan(str(many))  # a local file: never (its descriptor would be shared)
        refindex.scan(url, split_walk=False)
    finally:
        _split._merge = real
    assert default_merged and len(merged) == default_merged


def test_a_stalled_helper_is_not_waited_for(many, monkeypatch):
    url = to_memory(many)
    parent = os.getpid()
    real = _walk.visit_path

    def stalls_in_helper(ctx, path):
        if os.getpid() != parent:
            time.sleep(600)  # as if it hung on a lock another thread held at the fork
        real(ctx, path)

    monkeypatch.setattr(_walk, "visit_path", stalls_in_helper)
    t0 = time.perf_counter()
    split = _scan(url, split_walk=True)
    assert time.perf_counter() - t0 < 60
    monkeypatch.setattr(_walk, "visit_path", real)
    assert split == _scan(url, split_walk=False)


def test_a_helper_that_cannot_read_leaves_the_walk_to_this_process(many, monkeypatch):
    """No metadata prefetched, tiny blocks: the helper's first uncached read fails (it cannot fetch)."""
    url = to_memory(many)
    fetch = refindex.FetchOptions(block_size=512, first_read=512, tail_read=512, prefetch_metadata=False,
                                  whole_file_max=0)
    merged = []
    real = _split._merge
    monkeypatch.setattr(_split, "_merge", lambda ctx, path, payload: (merged.append(path), real(ctx, path, payload)))
    split = _scan(url, split_walk=True, fetch=fetch)
    assert len(merged) < GROUPS // 2  # it gave up early; this process visited the rest
    assert split == _scan(url, split_walk=False, fetch=fetch)


def test_errors_and_skips_are_those_of_the_one_process_walk(tmp_path):
    path = tmp_path / "bad.h5"
    _many_groups(path, bad=True)
    url = to_memory(path)
    errors = []
    for split in (True, False):
        with pytest.raises(RefindexError, match="backslash") as e:
            refindex.scan(url, split_walk=split)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and f"/g{GROUPS - 1:02d}/a\\b" in errors[0]
    skipped = _scan(url, split_walk=True, on_unsupported="skip")
    assert skipped == _scan(url, split_walk=False, on_unsupported="skip")
    assert json.loads(skipped)["refindex"]["skipped"]


def test_progress_counts_the_helpers_datasets_once(many):
    class Count:
        def __init__(self):
            self.total, self.done = None, 0

        def start(self, datasets):
            self.total = datasets

        def chunks(self, n):
            pass

        def dataset_done(self):
            self.done += 1

        def close(self):
            pass

    url = to_memory(many)
    counts = {}
    for split in (True, False):
        counts[split] = Count()
        refindex.scan(url, split_walk=split, progress=counts[split])
    assert counts[True].done == counts[False].done == counts[False].total > GROUPS


def test_split_walk_is_not_recorded():
    assert "split_walk" not in ScanOptions(split_walk=True).recorded()


def test_pynwb_files_split_as_they_walk(nwb_files):
    for path in nwb_files.values():
        url = to_memory(path)
        assert _scan(url, split_walk=True) == _scan(url, split_walk=False), path


def _groups(path) -> int:
    """How many groups a walk could share (the root's included); 2 for what h5py cannot open (kept: its error is compared)."""
    try:
        with h5py.File(path, "r") as f:
            found = [1]
            f.visititems(lambda name, obj: found.append(1) if isinstance(obj, h5py.Group) else None)
            return len(found)
    except Exception:  # noqa: BLE001 - not HDF5, or a file h5py refuses: both walks fail the same way below
        return 2


@pytest.mark.skipif(not CORPUS.exists(), reason=MISSING)
def test_corpus_split_as_it_walks():
    """Every file of the corpus of two or more groups, remote, split or not: the same index or the same
    error.  (A file of one group has nothing to share: that group is walked whole on one side; netCDF-C's
    2000-variable file alone took a third of this test's time so.)"""
    differ = []
    rows = [row for row in manifest_rows() if _groups(CORPUS / row["relpath"]) >= 2]
    assert len(rows) >= 20
    for row in rows:
        url = to_memory(CORPUS / row["relpath"])
        out = []
        for split in (True, False):
            try:
                out.append(_scan(url, split_walk=split, on_unsupported="skip"))
            except RefindexError as e:
                out.append(f"{type(e).__name__}: {e}")
        fsspec.filesystem("memory").rm(url)
        if out[0] != out[1]:
            differ.append(row["relpath"])
    assert not differ


_KILLED_PARENT = """
import os, sys, time
sys.path[:0] = {paths!r}
import refindex
from refindex.scanner import _walk
from test_split_walk import to_memory
url = to_memory({file!r})
parent = os.getpid()
real = _walk.visit_path

def stall(ctx, path):
    if os.getpid() != parent:
        open({pidfile!r}, "w").write(str(os.getpid()))
    time.sleep(600)  # both: the test kills this process meanwhile

_walk.visit_path = stall
refindex.scan(url, split_walk=True)
"""


def test_the_helper_dies_with_its_parent(many, tmp_path):
    """A scan killed mid-walk (a time limit, a user) leaves no helper behind."""
    import signal
    import subprocess
    import sys

    pidfile = tmp_path / "helper.pid"
    code = _KILLED_PARENT.format(paths=[os.path.dirname(__file__), os.path.dirname(os.path.dirname(__file__))],
                                 file=str(many), pidfile=str(pidfile))
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        started = until(lambda: proc.poll() is not None or (pidfile.exists() and pidfile.read_text()), 60)
        assert started and proc.poll() is None, "the helper never started"
        helper = int(pidfile.read_text())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def alive() -> bool:
        try:
            with open(f"/proc/{helper}/status") as fh:
                return not any(line.startswith("State:") and "Z" in line for line in fh)
        except FileNotFoundError:
            return False

    assert until(lambda: not alive(), 10)
