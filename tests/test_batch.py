"""Batch indexing (refindex.batch): many files, resumable, parallel, failures recorded.

A corpus of 20 generated files (pynwb NWB files, plain HDF5 files, one truncated
HDF5 file, one text file named .h5) is indexed by local worker processes, by a Dask
cluster and through a moto S3 server; every index must equal the single-file
``refindex.scan`` of its input, failures must be named in the manifest, a re-run must
do nothing and touching one file must re-index only that file.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import h5py
import numpy as np
import pytest

import refindex
from refindex.batch import read_manifest, run_batch
from refindex.cli import main as cli_main
from refindex.errors import RefindexError

from conftest import assert_same_values, consumer_open, json_roundtrip, moto_s3, zvalues
from waiting import until

N_NWB, N_PLAIN = 6, 12
BAD = ("broken/truncated.h5", "notes/not_hdf5.h5")


def _plain(path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.create_dataset("chunked", data=rng.integers(0, 1000, (60, 40)).astype("<i4"), chunks=(16, 16),
                         compression="gzip")
        f.create_dataset("contiguous", data=rng.standard_normal((50, 3)))
        f.create_group("g").create_dataset("small", data=np.arange(seed % 7 + 1, dtype="<u2"))
        f.attrs["seed"] = seed


def _nwb(path: Path, seed: int) -> None:
    import pynwb

    rng = np.random.default_rng(seed)
    nwb = pynwb.NWBFile(session_description=f"batch {seed}", identifier=f"batch-{seed}",
                        session_start_time=datetime(2024, 1, 2, tzinfo=timezone.utc))
    nwb.add_acquisition(pynwb.TimeSeries(name="ts", data=rng.standard_normal((200, 3)), unit="V", rate=10.0))
    with pynwb.NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """20 files in sub-folders: 6 NWB, 12 plain HDF5, one truncated, one not HDF5."""
    pytest.importorskip("pynwb")
    root = tmp_path_factory.mktemp("batch_corpus")
    for i in range(N_NWB):
        (root / "nwb").mkdir(exist_ok=True)
        _nwb(root / "nwb" / f"session{i:02d}.nwb", i)
    for i in range(N_PLAIN):
        sub = root / "plain" / f"part{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        _plain(sub / f"file{i:02d}.h5", 100 + i)
    (root / "broken").mkdir()
    _plain(root / "broken" / "whole.h5", 999)
    data = (root / "broken" / "whole.h5").read_bytes()
    (root / BAD[0]).write_bytes(data[: len(data) // 3])
    (root / "broken" / "whole.h5").unlink()
    (root / "notes").mkdir()
    (root / BAD[1]).write_text("this is not an HDF5 file\n" * 20)
    return root


@pytest.fixture()
def data(corpus, tmp_path) -> Path:
    """A private copy of the corpus (runs write indexes and manifests into it)."""
    dst = tmp_path / "data"
    shutil.copytree(corpus, dst)
    return dst


def _inputs(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".h5", ".nwb"))


def _assert_same_as_single_scans(report, root: Path) -> None:
    by_source = {r.source: r for r in report.results}
    for p in _inputs(root):
        r = by_source[str(p)]
        if str(p.relative_to(root)) in BAD:
            continue
        assert r.status in ("indexed", "up_to_date"), (p, r.error)
        with open(r.index) as fh:
            batch_refs = json.load(fh)
        assert batch_refs == json_roundtrip(refindex.scan(str(p))), p


def test_local_workers_index_resume_and_touch(data):
    report = run_batch(str(data / "**" / "*"), workers=2, progress=False)
    assert len(report.results) == N_NWB + N_PLAIN + 2
    assert {os.path.relpath(r.source, data) for r in report.failed} == set(BAD)
    assert len(report.indexed) == N_NWB + N_PLAIN
    _assert_same_as_single_scans(report, data)
    for r in report.indexed:  # indexes sit beside their inputs
        assert r.index == r.source + ".refs.json" and r.size == os.path.getsize(r.source)
        assert r.chunks is not None and r.keys and r.seconds is not None

    # manifest: one row per input, failures named with their reason
    manifest = data / "refindex-manifest.jsonl"
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert len(rows) == len(report.results)
    failed = {os.path.relpath(r["source"], data): r["error"] for r in rows if r["status"] == "failed"}
    assert set(failed) == set(BAD)
    assert all(failed.values())
    assert "not an HDF5" in failed[BAD[1]] or "signature" in failed[BAD[1]]
    assert not (data / BAD[0]).with_name("truncated.h5.refs.json").exists()  # no partial output

    # values read back through one index (plain zarr path) equal h5py's
    sample = next(p for p in _inputs(data) if p.suffix == ".h5" and "plain" in p.parts)
    with open(str(sample) + ".refs.json") as fh:
        g = consumer_open(json.load(fh))
    with h5py.File(sample, "r") as f:
        for name in ("chunked", "contiguous", "g/small"):
            assert_same_values(f[name][()], zvalues(g[name]))

    # second run: nothing to do for the good files; the failures are retried
    stamps = {r.index: os.stat(r.index).st_mtime_ns for r in report.indexed}
    again = run_batch(str(data / "**" / "*"), workers=2, progress=False)
    assert len(again.up_to_date) == N_NWB + N_PLAIN and not again.indexed
    assert {os.path.relpath(r.source, data) for r in again.failed} == set(BAD)
    assert {i: os.stat(i).st_mtime_ns for i in stamps} == stamps

    # touch one file (new content and mtime): only it is re-indexed
    _plain(sample, 4242)
    st = os.stat(sample)
    os.utime(sample, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    third = run_batch(str(data / "**" / "*"), workers=1, progress=False)
    assert [r.source for r in third.indexed] == [str(sample)]
    assert len(third.up_to_date) == N_NWB + N_PLAIN - 1
    with open(str(sample) + ".refs.json") as fh:
        assert json.load(fh) == json_roundtrip(refindex.scan(str(sample)))

    # --force rescans everything
    forced = run_batch(str(data / "**" / "*.nwb"), workers=0, progress=False, force=True,
                       manifest=data / "nwb-manifest.jsonl")
    assert len(forced.indexed) == N_NWB


def test_resume_without_manifest_uses_index_provenance(data):
    first = run_batch(str(data / "plain" / "**" / "*.h5"), workers=0, progress=False)
    assert len(first.indexed) == N_PLAIN
    os.unlink(first.manifest)  # e.g. an interrupted run that never wrote its manifest
    again = run_batch(str(data / "plain" / "**" / "*.h5"), workers=0, progress=False)
    assert len(again.up_to_date) == N_PLAIN
    # other scan options: the recorded fingerprint differs, so everything is rescanned
    changed = run_batch(str(data / "plain" / "**" / "*.h5"), workers=0, progress=False, inline_threshold=0, inline_dataset_threshold=0)
    assert len(changed.indexed) == N_PLAIN


def test_dask_local_cluster_mirrors_tree(data, tmp_path):
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "indexes"
    with distributed.LocalCluster(processes=False, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        report = run_batch(str(data / "**" / "*"), output=out, dask=client, progress=False)
    assert {os.path.relpath(r.source, data) for r in report.failed} == set(BAD)
    assert len(report.indexed) == N_NWB + N_PLAIN
    for r in report.indexed:  # output tree mirrors the input tree
        rel = os.path.relpath(r.source, data)
        assert r.index == str(out / rel) + ".refs.json"
    _assert_same_as_single_scans(report, data)
    rows = read_manifest(str(out / "refindex-manifest.jsonl"))
    assert {os.path.relpath(s, data) for s, r in rows.items() if r["status"] == "failed"} == set(BAD)


def test_cli_dask_scheduler_address(data, tmp_path):
    """`--dask-scheduler tcp://...` against a real scheduler whose workers are separate processes."""
    distributed = pytest.importorskip("distributed")
    out = tmp_path / "indexes"
    with distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=logging.CRITICAL) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://127.0.0.1:")
        code = cli_main(["batch", str(data / "plain" / "**" / "*.h5"), "-o", str(out), "--dask-scheduler", address,
                         "--no-progress"])
    assert code == 0
    rows = read_manifest(str(out / "refindex-manifest.jsonl"))
    assert len(rows) == N_PLAIN and all(r["status"] == "indexed" for r in rows.values())
    for source, row in rows.items():
        with open(row["index"]) as fh:
            assert json.load(fh) == json_roundtrip(refindex.scan(source)), source


def _pending_plugin():
    """A scheduler plugin noting the most refindex tasks (keys ``refindex-index-*``) submitted and not yet
    finished at any one moment, from the scheduler's own transitions (read back as its ``vars``)."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class Pending(SchedulerPlugin):
        name = "refindex-pending"

        def __init__(self) -> None:
            self.unfinished: set[str] = set()
            self.most = 0
            self.submitted = 0

        def transition(self, key, start, finish, *args, **kwargs) -> None:
            if not str(key).startswith("refindex-index-"):
                return
            if finish in ("waiting", "queued", "processing", "no-worker"):
                self.submitted += key not in self.unfinished and start == "released"
                self.unfinished.add(key)
            else:  # memory, erred, released, forgotten
                self.unfinished.discard(key)
            self.most = max(self.most, len(self.unfinished))

    return Pending()


def _comparable(report) -> list[tuple]:
    """A report's rows without what differs between any two runs (time taken, when, where the index went)."""
    return [(r.source, r.status, r.size, r.mtime, r.keys, r.arrays, r.chunks, r.inline_chunks, r.index_bytes,
             r.error, r.options) for r in report.results]


def test_dask_keeps_a_window_of_groups_submitted(data, tmp_path):
    """A Dask batch submits a window of groups (WINDOW per thread of the cluster) and tops it up as each
    completes, not a future per group at once: the scheduler never holds more refindex tasks unfinished than
    the window, every group still runs, and the rows are those of a run on local workers."""
    distributed = pytest.importorskip("distributed")
    from refindex.batch import _runners

    plugin = _pending_plugin()
    with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=1,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        client.register_plugin(plugin)
        report = run_batch(str(data / "**" / "*"), output=tmp_path / "dask", manifest=tmp_path / "d.jsonl",
                           dask=client, progress=False)
        seen = client.run_on_scheduler(lambda dask_scheduler: vars(dask_scheduler.plugins[plugin.name]))
    window = _runners.WINDOW  # one thread in the cluster
    n = N_NWB + N_PLAIN + len(BAD)  # local files: a group each
    assert n > window
    assert seen["submitted"] == n  # every group ran, none twice
    assert 1 < seen["most"] <= window, seen["most"]
    local = run_batch(str(data / "**" / "*"), output=tmp_path / "local", manifest=tmp_path / "l.jsonl",
                      workers=1, progress=False)
    assert _comparable(report) == _comparable(local)
    assert len(report.indexed) == N_NWB + N_PLAIN
    for a, b in zip(report.indexed, local.indexed):
        assert Path(a.index).read_bytes() == Path(b.index).read_bytes(), a.source


def test_list_file_parquet_format_and_parquet_manifest(data, tmp_path):
    files = [p for p in _inputs(data) if "plain" in p.parts][:3]
    listing = tmp_path / "urls.txt"
    listing.write_text("# inputs\n" + "\n".join(map(str, files)) + "\n\n")
    manifest = tmp_path / "m.parquet"
    report = run_batch(f"@{listing}", format="parquet", workers=0, progress=False, manifest=manifest)
    assert len(report.indexed) == 3 and report.ok
    for p in files:
        g = refindex.open(str(p) + ".refs.parq")
        with h5py.File(p, "r") as f:
            for name in ("chunked", "contiguous", "g/small"):
                assert_same_values(f[name][()], zvalues(g[name]))
    again = run_batch(str(listing), format="parquet", workers=0, progress=False, manifest=manifest)
    assert len(again.up_to_date) == 3


def test_indexes_of_an_older_form_are_made_again(data, tmp_path, monkeypatch):
    """A re-run after the form of indexes changed (refindex.options.INDEX_FORM: an NWB index's fill values,
    say) indexes every input again, though no source changed; the run after it finds them up to date."""
    from refindex.batch import _manifest
    from refindex.options import INDEX_FORM

    files = [p for p in _inputs(data) if "plain" in p.parts][:2]
    listing = tmp_path / "urls.txt"
    listing.write_text("\n".join(map(str, files)) + "\n")
    monkeypatch.setattr(_manifest, "INDEX_FORM", INDEX_FORM - 1)
    assert len(run_batch(f"@{listing}", workers=0, progress=False).indexed) == 2
    monkeypatch.undo()
    again = run_batch(f"@{listing}", workers=0, progress=False)
    assert len(again.indexed) == 2 and not again.up_to_date
    for p in files:
        with open(str(p) + ".refs.json") as fh:
            assert json.load(fh) == json_roundtrip(refindex.scan(str(p)))
    assert len(run_batch(f"@{listing}", workers=0, progress=False).up_to_date) == 2


def _blocked_worker() -> int | None:
    """pid of our child worker process blocked opening a FIFO (no writer yet)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            if ppid != os.getpid():
                continue
            with open(f"/proc/{pid}/wchan") as fh:
                if "wait_for_partner" in fh.read():
                    return int(pid)
        except (OSError, ValueError, IndexError):
            continue
    return None


def test_worker_crash_and_hang_do_not_stop_the_batch(data, tmp_path):
    """A worker killed by SIGSEGV mid-file, and a file that hangs past the timeout, are failures."""
    good = [p for p in _inputs(data) if "plain" in p.parts][:2]
    crash_fifo = str(tmp_path / "crash.h5")
    hang_fifo = str(tmp_path / "hang.h5")
    os.mkfifo(crash_fifo)
    os.mkfifo(hang_fifo)  # opening a FIFO for reading blocks forever: a "hostile" input

    killed = []

    def crash_when_blocked() -> None:  # the crash FIFO comes first: the first blocked worker is on it
        found: list[int | None] = []
        if until(lambda: found.append(_blocked_worker()) or found[-1], 20, every=0.05):
            os.kill(found[-1], signal.SIGSEGV)
            killed.append(found[-1])

    killer = threading.Thread(target=crash_when_blocked, daemon=True)
    killer.start()
    t0 = time.perf_counter()
    report = run_batch([str(good[0]), crash_fifo, hang_fifo, str(good[1])], workers=1, timeout=4,
                       progress=False, manifest=tmp_path / "m.jsonl")
    killer.join(5)
    errors = {r.source: r.error for r in report.failed}
    assert set(errors) == {crash_fifo, hang_fifo}
    if killed:
        assert "crashed (signal 11" in errors[crash_fifo]
    else:  # /proc/<pid>/wchan not available here: the FIFO then simply times out
        assert "timed out" in errors[crash_fifo]
    assert "timed out" in errors[hang_fifo]
    assert [r.source for r in report.indexed] == [str(good[0]), str(good[1])]
    assert time.perf_counter() - t0 < 40


def test_cli_batch_exit_codes(data, capsys):
    code = cli_main(["batch", str(data / "**" / "*"), "--workers", "0", "--no-progress"])
    assert code == 1
    err = capsys.readouterr().err
    assert "failed" in err and "truncated.h5" in err and "not_hdf5.h5" in err
    code = cli_main(["batch", str(data / "nwb" / "*.nwb"), "--workers", "0", "--no-progress",
                     "--manifest", str(data / "nwb.jsonl")])
    assert code == 0
    assert "0 indexed, 6 up to date" in capsys.readouterr().err  # indexed by the first run
    assert cli_main(["batch", str(data / "nothing" / "*.h5"), "--no-progress"]) == 2


# ------------------------------------------------------------------ combine
def _netcdf_pieces(folder: Path) -> np.ndarray:
    xr = pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    folder.mkdir()
    parts = []
    for i in range(3):
        temp = np.random.default_rng(i).standard_normal((10, 4))
        parts.append(temp)
        ds = xr.Dataset({"temp": (("time", "x"), temp)}, coords={"time": np.arange(10) + 10 * i, "x": np.arange(4)})
        ds.to_netcdf(folder / f"piece{i}.nc", engine="h5netcdf", encoding={"temp": {"chunksizes": (5, 4)}})
    return np.concatenate(parts)


def test_combine_netcdf_pieces(tmp_path):
    full = _netcdf_pieces(tmp_path / "nc")
    out = tmp_path / "combined.json"
    report = run_batch(str(tmp_path / "nc" / "*.nc"), workers=0, progress=False, combine=out,
                       concat_dims=["time"], identical_dims=["x"], timeout=60)
    assert report.combined == str(out)
    g = consumer_open(json.loads(out.read_text()))
    np.testing.assert_array_equal(g["temp"][...], full)
    np.testing.assert_array_equal(g["time"][...], np.arange(30))


def test_combine_failures_are_clear_errors(data, tmp_path):
    with pytest.raises(RefindexError, match="cannot combine: 2 input"):
        run_batch(str(data / "**" / "*"), workers=0, progress=False, combine=tmp_path / "c.json", timeout=60)
    with pytest.raises(RefindexError, match="needs JSON"):
        run_batch(str(data / "nwb" / "*.nwb"), format="parquet", combine=tmp_path / "c.json")
    # NWB files have no netCDF dimensions: nothing to combine along "time", said naming a file
    with pytest.raises(RefindexError, match=r"\.nwb: no variable has the dimension 'time'"):
        run_batch(str(data / "nwb" / "*.nwb"), workers=0, progress=False, combine=tmp_path / "c.json", timeout=60)
    assert not (tmp_path / "c.json").exists()


# ------------------------------------------------------------------ S3 (moto server)
@pytest.fixture(scope="module")
def s3():
    """One moto server for this module (tests use distinct prefixes)."""
    with moto_s3("k", "s") as opts:
        import s3fs

        fs = s3fs.S3FileSystem(**opts)
        if not fs.exists("archive"):
            fs.mkdir("archive")
        yield opts, fs


def test_s3_in_and_out(s3, data):
    opts, fs = s3
    picks = [p for p in _inputs(data) if "nwb" in p.parts][:2] + [p for p in _inputs(data) if "plain" in p.parts][:2]
    picks.append(data / BAD[0])
    for p in picks:
        fs.put_file(str(p), f"archive/raw/{p.relative_to(data).as_posix()}")
    report = run_batch("s3://archive/raw/**/*", output="s3://archive/indexes", storage_options=opts, workers=2,
                       progress=False)
    assert [os.path.basename(r.source) for r in report.failed] == ["truncated.h5"]
    assert len(report.indexed) == 4
    for r in report.indexed:
        rel = r.source.removeprefix("s3://archive/raw/")
        assert r.index == f"s3://archive/indexes/{rel}.refs.json"
        assert r.etag
        stored = json.loads(fs.cat_file(r.index.removeprefix("s3://")))
        assert stored == json_roundtrip(refindex.scan(r.source, storage_options=opts))
        assert "s3://" in json.dumps(stored["templates"]) and opts["endpoint_url"] not in json.dumps(stored)
    rows = read_manifest("s3://archive/indexes/refindex-manifest.jsonl", opts)
    assert len(rows) == 5
    again = run_batch("s3://archive/raw/**/*", output="s3://archive/indexes", storage_options=opts, workers=0,
                      progress=False)
    assert len(again.up_to_date) == 4 and not again.indexed
    # replace one object: only it is re-indexed
    victim = picks[2]
    _plain(victim, 777)
    fs.put_file(str(victim), f"archive/raw/{victim.relative_to(data).as_posix()}")
    third = run_batch("s3://archive/raw/**/*", output="s3://archive/indexes", storage_options=opts, workers=0,
                      progress=False)
    assert [r.source for r in third.indexed] == [f"s3://archive/raw/{victim.relative_to(data).as_posix()}"]


def test_s3_uploads_overlap_and_a_failed_one_is_its_row(s3, data):
    """Remote inputs a group at a time write their indexes into the bucket while the next files are scanned;
    every index lands whole (equal to a scan), and an upload that fails (here into a bucket that does not
    exist) is its file's failed row naming the index, never the batch's end."""
    opts, fs = s3
    picks = [p for p in _inputs(data) if "plain" in p.parts][:3]
    for p in picks:
        fs.put_file(str(p), f"archive/up/raw/{p.name}")
    report = run_batch("s3://archive/up/raw/*", output="s3://archive/up/idx", manifest=str(data.parent / "up.jsonl"),
                       storage_options=opts, workers=0, progress=False)
    assert report.ok and len(report.indexed) == 3
    for r in report.indexed:
        assert json.loads(fs.cat_file(r.index.removeprefix("s3://"))) == json_roundtrip(
            refindex.scan(r.source, storage_options=opts))
    gone = run_batch("s3://archive/up/raw/*", output="s3://no-such-bucket-here/idx", force=True,
                     manifest=str(data.parent / "gone.jsonl"), storage_options=opts, workers=0, progress=False)
    assert len(gone.failed) == 3 and not gone.indexed
    for r in gone.failed:
        assert r.index.startswith("s3://no-such-bucket-here/idx/") and r.index in r.error


def test_s3_parquet_indexes(s3, data):
    """Parquet index folders uploaded to S3 (records first, .zmetadata last) read back exactly."""
    opts, fs = s3
    src = [p for p in _inputs(data) if "plain" in p.parts][0]
    fs.put_file(str(src), "archive/pq/in/one.h5")
    report = run_batch("s3://archive/pq/in/*.h5", output="s3://archive/pq/out", format="parquet",
                       storage_options=opts, workers=0, progress=False)
    assert report.ok and report.indexed[0].index == "s3://archive/pq/out/one.h5.refs.parq"
    assert fs.exists("archive/pq/out/one.h5.refs.parq/.zmetadata")
    assert not [p for p in fs.find("archive/pq") if ".refindex-" in p]  # no temporary leftovers
    g = refindex.open("s3://archive/pq/out/one.h5.refs.parq", storage_options=opts, remote_options=opts)
    with h5py.File(src, "r") as f:
        for name in ("chunked", "contiguous", "g/small"):
            assert_same_values(f[name][()], zvalues(g[name]))
    again = run_batch("s3://archive/pq/in/*.h5", output="s3://archive/pq/out", format="parquet",
                      storage_options=opts, workers=0, progress=False)
    assert len(again.up_to_date) == 1
