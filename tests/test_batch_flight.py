"""Batches of remote files: many files in flight per worker, and freshness from the bucket listing.

A worker takes remote files a group at a time and asks their first round trips together
(:func:`refindex.batch._task.index_group`); the indexes must be the bytes a file-at-a-time scan
writes, a failing or hanging file must stay that file's failed row, and a Dask cluster runs the
same groups.  A re-run over an S3 prefix learns sizes and ETags from one listing of the folder
instead of a HEAD per object (counted on moto's server), and still re-indexes a changed object.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from refindex.batch import run_batch

from conftest import moto_requests, moto_s3
from webserver import serve

N_FILES = 8


def _netcdf(path: Path, day: int) -> None:
    """A small daily CF file as xarray writes it (its own time units), one variable in 4 chunks."""
    import numpy as np
    import pandas as pd
    import xarray as xr

    rng = np.random.default_rng(day)
    ds = xr.Dataset({"tas": (("time", "lat", "lon"), rng.normal(280, 5, (1, 8, 16)).astype("f4"))},
                    coords={"time": pd.date_range("2000-01-01", periods=1) + pd.Timedelta(days=day),
                            "lat": np.linspace(-80, 80, 8), "lon": np.arange(16) * 22.5})
    ds.to_netcdf(path, engine="h5netcdf", encoding={"tas": {"chunksizes": (1, 4, 8)}})


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("archive")
    out = {}
    for i in range(N_FILES + 1):
        p = folder / f"tas_{i:02d}.nc"
        _netcdf(p, i)
        out[p.name] = p.read_bytes()
    return out


class _AllAsked:
    """Holds every file's first ranges until each of ``names`` has been asked for (or ``limit`` s passed):
    only a batch with all of them in flight at once gets its answers before the limit."""

    def __init__(self, names: list[str], limit: float = 20.0):
        self.names, self.limit, self.asked = set(names), limit, set()
        self.cond = threading.Condition()
        self.all_at_once = False
        self.late = False  # a file's ranges waited out the limit: not all were in flight together

    def gate(self, name: str) -> "_Gate":
        return _Gate(self, name)


class _Gate:
    def __init__(self, shared: _AllAsked, name: str):
        self.shared, self.name = shared, name

    def wait(self, timeout: float | None = None) -> bool:
        s = self.shared
        with s.cond:
            s.asked.add(self.name)
            if s.asked >= s.names:
                s.all_at_once = True
                s.cond.notify_all()
            ok = s.cond.wait_for(lambda: s.all_at_once, min(timeout or s.limit, s.limit))
            s.late = s.late or not ok
            return ok


def _serve_archive(server, archive: dict[str, bytes], names: list[str]) -> list[str]:
    return [server.put(n, archive[n]) for n in names]


def _gated(server, archive, names) -> tuple[list[str], "_AllAsked"]:
    """The files served, each one's first range held until every file's has been asked for."""
    urls_ = _serve_archive(server, archive, names)
    gate = _AllAsked(names)
    for n in names:
        server.held[(n, 0)] = gate.gate(n)
    return urls_, gate


def _index_bytes(report) -> dict[str, bytes]:
    return {os.path.basename(r.source): Path(r.index).read_bytes() for r in report.results}


def test_files_in_flight_write_the_indexes_of_a_file_at_a_time_scan(archive, tmp_path):
    """A worker's group asks every file's first round trip before scanning any (the server answers none
    until all are asked: a file-at-a-time batch would wait out the gate's limit and fail), and writes
    the same bytes as a batch that scans one file at a time."""
    names = sorted(archive)[:N_FILES]
    with serve() as server:
        urls_, gate = _gated(server, archive, names)
        grouped = run_batch(urls_, output=tmp_path / "grouped", manifest=tmp_path / "g.jsonl", workers=1,
                            in_flight=N_FILES, progress=False, timeout=60)
        assert gate.all_at_once and not gate.late
        server.held.clear()
        single = run_batch(urls_, output=tmp_path / "single", manifest=tmp_path / "s.jsonl", workers=0,
                           in_flight=1, progress=False)
    assert grouped.ok and len(grouped.indexed) == N_FILES, grouped.summary()
    assert single.ok and len(single.indexed) == N_FILES
    assert [r.source for r in grouped.results] == urls_  # rows in the order of the inputs
    assert _index_bytes(grouped) == _index_bytes(single)


def test_a_hanging_and_a_missing_file_are_their_rows_only(archive, tmp_path):
    """In a group, a file the server never answers makes the worker overrun the group's limit: that file
    (the group noted it was scanning it) is "timed out", a missing one fails by name, the others are indexed."""
    names = sorted(archive)[:3]
    release = threading.Event()
    with serve() as server:
        urls_ = _serve_archive(server, archive, names)
        hang = server.put("hang.nc", archive[names[0]])
        server.held[("hang.nc", 0)] = release
        missing = server.url("missing.nc")
        inputs = [hang, urls_[0], missing] + urls_[1:]
        try:
            report = run_batch(inputs, output=tmp_path / "out", manifest=tmp_path / "m.jsonl", workers=1,
                               in_flight=8, progress=False, timeout=8)
        finally:
            release.set()
    errors = {r.source: r.error for r in report.failed}
    assert set(errors) == {hang, missing}, report.summary()
    assert "timed out" in errors[hang]
    assert "404" in errors[missing] or "not found" in errors[missing].lower()
    assert sorted(r.source for r in report.indexed) == sorted(urls_)
    assert [r.source for r in report.results] == inputs


def test_dask_local_cluster_runs_the_groups(archive, tmp_path):
    """On a Dask LocalCluster a group is one task: all its first round trips in flight at once too."""
    distributed = pytest.importorskip("distributed")
    names = sorted(archive)[:N_FILES]
    with serve() as server:
        urls_, gate = _gated(server, archive, names)
        with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=1,
                                      dashboard_address=None) as cluster, distributed.Client(cluster) as client:
            report = run_batch(urls_, output=tmp_path / "dask", manifest=tmp_path / "d.jsonl", dask=client,
                               workers=1, in_flight=N_FILES, progress=False)
        assert gate.all_at_once and not gate.late
        server.held.clear()
        single = run_batch(urls_, output=tmp_path / "single", manifest=tmp_path / "s.jsonl", workers=0,
                           in_flight=1, progress=False)
    assert report.ok and len(report.indexed) == N_FILES, report.summary()
    assert _index_bytes(report) == _index_bytes(single)


def test_dask_group_whose_worker_dies_runs_each_file_alone(archive, tmp_path):
    """A Dask worker killed while its group waits on a file (the scheduler allows no retry: KilledWorker)
    makes the batch run each of the group's files alone, through the window, on the restarted worker: every
    file is indexed once more and written as a file-at-a-time scan writes it."""
    distributed = pytest.importorskip("distributed")
    import signal

    import dask

    names = sorted(archive)[:4]
    with serve() as server:
        urls_ = _serve_archive(server, archive, names)
        server.held[(names[0], 0)] = release = threading.Event()
        server.watched[("GET", names[0])] = asked = threading.Event()
        with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
                distributed.LocalCluster(processes=True, n_workers=1, threads_per_worker=1, host="127.0.0.1",
                                         dashboard_address=None, silence_logs=logging.CRITICAL) as cluster, \
                distributed.Client(cluster) as client:
            (pid,) = client.run(os.getpid).values()

            def kill_when_asked() -> None:
                if asked.wait(60):
                    os.kill(pid, signal.SIGKILL)
                release.set()

            killer = threading.Thread(target=kill_when_asked, daemon=True)
            killer.start()
            report = run_batch(urls_, output=tmp_path / "dask", manifest=tmp_path / "d.jsonl", dask=client,
                               workers=1, in_flight=4, progress=False)
            killer.join(5)
            assert pid not in client.run(os.getpid).values()  # the worker was killed and started again
        asked_for = [path for method, path, _ in server.requests if method == "GET"]
        single = run_batch(urls_, output=tmp_path / "single", manifest=tmp_path / "s.jsonl", workers=0,
                           in_flight=1, progress=False)
    assert report.ok and len(report.indexed) == 4, report.summary()
    assert [r.source for r in report.results] == urls_
    assert _index_bytes(report) == _index_bytes(single)
    for n in names:  # asked for in the group (the held one: its request died with the worker), then alone
        assert sum(p.endswith("/" + n) for p in asked_for) >= 2, (n, asked_for)


# ------------------------------------------------------------------ freshness from the listing (moto)
def test_rerun_learns_freshness_from_the_listing(archive, tmp_path):
    """A re-run over N unchanged objects (named one by one, in a list) lists their folder and the
    indexes' folder instead of N HEADs; a replaced object is still indexed again."""
    names = sorted(archive)[:N_FILES]
    listing = tmp_path / "inputs.txt"
    with moto_s3("k", "s") as opts:
        import s3fs

        fs = s3fs.S3FileSystem(**opts)
        fs.mkdir("flight")
        for n in names:
            fs.pipe_file(f"flight/raw/{n}", archive[n])
        listing.write_text("".join(f"s3://flight/raw/{n}\n" for n in names))
        kw = dict(output="s3://flight/idx", manifest=tmp_path / "m.jsonl", storage_options=opts, workers=0,
                  progress=False)
        with moto_requests() as seen:
            first = run_batch(f"@{listing}", **kw)
            assert first.ok and len(first.indexed) == N_FILES
            seen.lines.clear()
            again = run_batch(f"@{listing}", **kw)
            assert len(again.up_to_date) == N_FILES and not again.indexed
            assert seen.of("HEAD") == [], seen.lines  # neither the objects nor their indexes, one by one
            assert not [line for line in seen.of("GET", "/flight/raw/") if "list-type" not in line]
            assert 1 <= len(seen.of("GET", "list-type")) <= 2  # the inputs' folder, the indexes' folder
            fs.pipe_file(f"flight/raw/{names[2]}", archive[sorted(archive)[N_FILES]])  # replaced
            third = run_batch(f"@{listing}", **kw)
    assert [os.path.basename(r.source) for r in third.indexed] == [names[2]]
    assert len(third.up_to_date) == N_FILES - 1


def _append_setup(server, archive: dict[str, bytes], tmp_path: Path) -> tuple[list[str], str, dict]:
    """N_FILES files indexed by a first run (one at a time, in this process), and one more file served:
    the URLs of all, the new one's name and the run's keywords."""
    names = sorted(archive)
    urls_ = _serve_archive(server, archive, names)
    kw = dict(output=tmp_path / "idx", manifest=tmp_path / "m.jsonl", workers=0, progress=False)
    first = run_batch(urls_[:N_FILES], **kw)
    assert first.ok and len(first.indexed) == N_FILES
    return urls_, names[N_FILES], kw


def test_new_files_are_scanned_while_the_others_freshness_is_asked(archive, tmp_path):
    """An append: the new file's scan starts while the unchanged files' HEADs (a store without a
    listing) are still unanswered, and the old files are not read."""
    with serve() as server:
        urls_, new, kw = _append_setup(server, archive, tmp_path)
        go, scanning = threading.Event(), threading.Event()
        server.waiting[("HEAD", None)] = go
        server.watched[("GET", new)] = scanning
        before = len(server.requests)
        seen = {}

        def release() -> None:  # the HEADs answer once the new file is being read (or after 20 s: too late)
            seen["in_time"] = scanning.wait(20)
            go.set()

        t = threading.Thread(target=release)
        t.start()
        again = run_batch(urls_, **kw)
        t.join()
        asked = server.requests[before:]
    assert seen["in_time"], "the new file was not read until the old files' HEADs were answered"
    assert [os.path.basename(r.source) for r in again.indexed] == [new]
    assert len(again.up_to_date) == N_FILES
    assert {p.lstrip("/") for m, p, _ in asked if m == "GET"} == {new}
    assert sum(m == "HEAD" for m, _, _ in asked) >= N_FILES


def test_an_append_interrupted_before_the_store_answered_keeps_the_old_rows(archive, tmp_path):
    """Ctrl-C while the new file is read and the old files' HEADs are unanswered: the manifest keeps the
    old files' rows as they were (not dropped: the next run would scan them all again), and the next
    run indexes only the new file."""
    import signal

    with serve() as server:
        urls_, new, kw = _append_setup(server, archive, tmp_path)
        rows_before = Path(kw["manifest"]).read_text().splitlines()
        go, reading, heads = threading.Event(), threading.Event(), threading.Event()
        server.waiting[("HEAD", None)] = go
        server.waiting[("GET", new)] = go
        server.watched[("GET", new)] = reading
        server.watched[("HEAD", None)] = heads

        def interrupt() -> None:
            if reading.wait(20) and heads.wait(20):
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

        t = threading.Thread(target=interrupt)
        t.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                run_batch(urls_, **kw)
        finally:
            t.join()
            go.set()
        assert Path(kw["manifest"]).read_text().splitlines() == rows_before
        del server.waiting[("HEAD", None)], server.waiting[("GET", new)]
        before = len(server.requests)
        again = run_batch(urls_, **kw)
        asked = server.requests[before:]
    assert [os.path.basename(r.source) for r in again.indexed] == [new]
    assert len(again.up_to_date) == N_FILES
    assert {p.lstrip("/") for m, p, _ in asked if m == "GET"} == {new}
