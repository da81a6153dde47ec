"""Icechunk repositories as refindex's output (issue #14 parts 3-4).

Everything here is real: icechunk 2.3 repositories on local disk and on moto's S3 server,
read back through plain zarr, hdmf-zarr's NWBZarrIO and refindex's read side, and compared
with h5py, NWBHDF5IO and the v2 index of the same scan.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import warnings

import h5py
import nwbcompare
import numpy as np
import pytest
import zarr
from conftest import moto_s3
import test_v3
from corpus import sampled
from test_v3 import NO_CORPUS, ROWS, all_arrays, assert_same_as_v2, hdf5_nwb, nwb_read, open2, roundtrip

import refindex
from refindex import formats, pipeline
from refindex.options import ScanOptions
from refindex.read import IcechunkIndex
from refindex.formats.icechunk import IcechunkTarget

pytest.importorskip("icechunk")
nwb3 = test_v3.nwb3  # the NWB test files (fixture), and hdmf-zarr ios closed after each test
_close_ios = test_v3._close_ios
REFERENCED = {"inline_threshold": 0, "inline_dataset_threshold": 0}


@pytest.fixture(autouse=True)
def _icechunk_garbage(collect_in_main_thread):
    """Icechunk objects are released between tests, in the main thread (see conftest)."""



def make_file(path, scale: float = 1.0, *, nan_attr: bool = False) -> None:
    rng = np.random.default_rng(int(scale * 10))
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=rng.normal(size=(60, 40)) * scale, chunks=(16, 16), compression="gzip",
                         shuffle=True)
        f.create_dataset("sparse", shape=(100,), chunks=(10,), dtype="i4", fillvalue=-1)[5:15] = 7
        f.create_dataset("scalar", data=np.float32(2.5 * scale))
        f.create_dataset("text", data=["a", "bc", "def"], dtype=h5py.string_dtype())
        g = f.create_group("sub")
        g.create_dataset("y", data=np.arange(1000, dtype=">i8").reshape(10, 100), chunks=(5, 50))
        g.attrs["units"] = "m"
        if nan_attr:
            g.attrs["resolution"] = np.nan


def history(repo: str, storage_options=None, branch: str = "main") -> list[str]:
    import icechunk as ic

    from refindex.formats.icechunk import storage_of

    r = ic.Repository.open(storage_of(repo, storage_options))
    return [s.id for s in r.ancestry(branch=branch)]


def assert_reads_like_h5py(group: zarr.Group, path) -> None:
    with h5py.File(path, "r") as f:
        for name in ("x", "sparse", "scalar", "sub/y"):
            np.testing.assert_array_equal(group[name][...], f[name][...], err_msg=name)
        assert [str(v) for v in group["text"][...]] == [v.decode() for v in f["text"][...]]
        assert dict(group["sub"].attrs) == {"units": "m"}


# ---------------------------------------------------------------- local repositories


def test_scan_to_icechunk_reads_back_exact_and_records_provenance(tmp_path):
    src, repo = tmp_path / "a.h5", tmp_path / "repo"
    make_file(src)
    summary = refindex.scan_to_icechunk(src, repo, group="files/a", **REFERENCED)
    assert summary["containers"] == [f"file://{tmp_path.resolve()}/"]
    assert summary["chunks_referenced"] > 10 and summary["group"] == "/files/a"
    g = refindex.open(repo, group="files/a")
    assert_reads_like_h5py(g, src)
    # the commit names the source, its size and mtime and refindex's version; its metadata the provenance
    import icechunk as ic

    r = ic.Repository.open(ic.local_filesystem_storage(str(repo)))
    tip = next(iter(r.ancestry(branch="main")))
    assert str(src.resolve()) in tip.message and f"size {src.stat().st_size}" in tip.message
    assert f"refindex {refindex.__version__}" in tip.message and "mtime" in tip.message
    record = tip.metadata["refindex"]["groups"]["/files/a"]
    assert record["source"]["size"] == src.stat().st_size and record["zarr_format"] == 3
    assert record["containers"] == summary["containers"]
    # the repository declares exactly that container, so a reader knows what to authorize
    info = refindex.info(repo, group="files/a")
    assert info["format"] == "icechunk" and info["containers"] == summary["containers"]
    assert info["chunks_referenced"] == summary["chunks_referenced"] and info["arrays"] == 5
    report = refindex.verify(src, IcechunkIndex(str(repo), group="files/a"))
    assert report.ok and report.count("exact") == 5, report.summary()


def test_rescan_replaces_group_and_other_groups_stay(tmp_path):
    a, b, repo = tmp_path / "a.h5", tmp_path / "b.h5", tmp_path / "repo"
    make_file(a)
    make_file(b, 2.0)
    refindex.scan_to_icechunk(a, repo, group="a")
    refindex.scan_to_icechunk(b, repo, group="b", **REFERENCED)
    make_file(a, 3.0)  # the source changes: reading the old index is refused, a re-scan replaces it
    with pytest.raises(refindex.StaleIndexError):
        refindex.open(repo, group="a")
    refindex.scan_to_icechunk(a, repo, group="a", **REFERENCED)
    assert_reads_like_h5py(refindex.open(repo, group="a"), a)
    assert_reads_like_h5py(refindex.open(repo, group="b"), b)
    assert len(history(str(repo))) == 4  # the initial commit and one per scan
    # an older snapshot still reads what it held
    old = history(str(repo))[1]
    assert set(refindex.open(repo, snapshot=old, check_source=False)) == {"a", "b"}


def test_branches_and_a_failed_scan_commit_nothing(tmp_path):
    src, repo = tmp_path / "a.h5", tmp_path / "repo"
    make_file(src)
    refindex.scan_to_icechunk(src, repo, group="a")
    before = history(str(repo))
    refindex.scan_to_icechunk(src, repo, group="a", branch="dev", **REFERENCED)
    assert history(str(repo)) == before and len(history(str(repo), branch="dev")) == len(before) + 1
    assert_reads_like_h5py(refindex.open(repo, group="a", branch="dev"), src)
    bad = tmp_path / "nan.h5"
    make_file(bad, nan_attr=True)
    with pytest.raises(refindex.UnsupportedError) as e:
        refindex.scan_to_icechunk(bad, repo, group="bad")
    assert "nan.h5" in str(e.value) and "/sub" in str(e.value) and "'resolution'" in str(e.value)
    assert history(str(repo)) == before
    with pytest.raises(refindex.NotHDF5Error):
        (tmp_path / "junk.h5").write_bytes(b"not hdf5 at all" * 100)
        refindex.scan_to_icechunk(tmp_path / "junk.h5", repo, group="junk")
    assert history(str(repo)) == before


def test_nan_attributes_skipped_by_name_when_asked(tmp_path):
    bad, repo = tmp_path / "nan.h5", tmp_path / "repo"
    make_file(bad, nan_attr=True)
    summary = refindex.scan_to_icechunk(bad, repo, on_unsupported="skip")
    assert {"path": "/sub", "attribute": "resolution"}.items() <= summary["skipped"][0].items()
    g = refindex.open(repo)
    assert dict(g["sub"].attrs) == {"units": "m"}
    assert refindex.info(repo)["skipped"] == summary["skipped"]  # recorded, never silently dropped


def test_unreadable_attribute_fails_or_is_recorded_as_in_v2(tmp_path):
    """An attribute h5py cannot read safely fails the Icechunk scan with the v2 error (nothing committed),
    or with ``on_unsupported="skip"`` is left out and recorded in the summary and the commit's record."""
    src, repo = tmp_path / "vlen_regref.h5", tmp_path / "repo"
    test_v3._vlen_regref_file(src)
    with pytest.raises(refindex.UnsupportedError) as v2_err:
        refindex.scan(str(src))
    with pytest.raises(refindex.UnsupportedError) as err:
        refindex.scan_to_icechunk(src, repo, group="f")
    assert str(err.value) == str(v2_err.value) and err.value.path == "/g/dset_main"
    assert not repo.exists()  # the scan failed before any repository was touched
    expected = refindex.scan(str(src), on_unsupported="skip")["refindex"]["skipped"]
    assert [s["attribute"] for s in expected] == ["Vlen_REGREF"]
    summary = refindex.scan_to_icechunk(src, repo, group="f", on_unsupported="skip")
    assert summary["skipped"] == expected
    import icechunk as ic

    tip = next(iter(ic.Repository.open(ic.local_filesystem_storage(str(repo))).ancestry(branch="main")))
    assert tip.metadata["refindex"]["groups"]["/f"]["skipped"] == expected
    assert len(history(str(repo))) == 2  # the repository's initial commit and this scan's
    g = refindex.open(repo, group="f")
    assert dict(g["g/dset_main"].attrs) == {"kept": 3}
    np.testing.assert_array_equal(g["g/dset_main"][...], np.arange(12).reshape(3, 4))


def test_failure_half_way_through_the_write_leaves_history_unchanged(tmp_path, monkeypatch):
    src, repo = tmp_path / "a.h5", tmp_path / "repo"
    make_file(src)
    refindex.scan_to_icechunk(src, repo, group="a", **REFERENCED)
    before = history(str(repo))
    calls = []
    real = formats.icechunk.write_refs

    def failing(store, path, *a, **kw):  # refindex's own step, after documents and some refs went in
        calls.append(path)
        if len(calls) == 2:
            raise refindex.RefindexError("injected failure", path="/" + path)
        return real(store, path, *a, **kw)

    monkeypatch.setattr(formats.icechunk, "write_refs", failing)
    for group in ("a", "b"):  # replacing a group, adding one
        calls.clear()
        with pytest.raises(refindex.RefindexError, match="injected failure") as e:
            refindex.scan_to_icechunk(src, repo, group=group, **REFERENCED)
        assert "a.h5" in str(e.value)
        assert len(calls) == 2 and history(str(repo)) == before
    monkeypatch.undo()
    assert set(refindex.open(repo)) == {"a"}
    assert_reads_like_h5py(refindex.open(repo, group="a"), src)  # the old index, untouched


def test_cli_scan_and_read_commands(tmp_path):
    src, repo = tmp_path / "a.h5", tmp_path / "repo"
    make_file(src)
    run = [sys.executable, "-m", "refindex"]
    out = subprocess.run(run + ["scan", str(src), "--format", "icechunk", "-o", str(repo), "--group", "g",
                                "--inline-threshold", "0"], capture_output=True, text=True, check=True)
    assert "committed" in out.stderr and "file://" in out.stderr
    out = subprocess.run(run + ["verify", str(src), str(repo), "--group", "g"], capture_output=True, text=True)
    assert out.returncode == 0 and "5 exact" in out.stdout, out.stdout + out.stderr
    out = subprocess.run(run + ["info", str(repo), "--group", "g"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["containers"] == [f"file://{tmp_path.resolve()}/"]
    out = subprocess.run(run + ["schema", str(repo), "--group", "g", "--members-only"], capture_output=True,
                         text=True, check=True)
    assert set(json.loads(out.stdout)["members"]) == {"x", "sparse", "scalar", "text", "sub"}
    out = subprocess.run(run + ["scan", str(src), "--format", "icechunk"], capture_output=True, text=True)
    assert out.returncode == 2 and "-o REPOSITORY" in out.stderr


def test_import_refindex_loads_no_icechunk():
    code = "import sys, refindex, refindex.read, refindex.formats; print('icechunk' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


# ---------------------------------------------------------------- NWB through hdmf-zarr


@pytest.mark.parametrize("name", ["main", "base"])
def test_nwb_through_nwbzarrio_over_the_session_store(nwb3, tmp_path, name):
    """``NWBZarrIO(path=session.store)`` equals ``NWBHDF5IO`` container by container, field by field."""
    repo = tmp_path / "repo"
    summary = refindex.scan_to_icechunk(nwb3[name], repo)
    assert summary["skipped"] == []
    import icechunk as ic

    from refindex.formats.icechunk import credentials_for, declared_containers

    storage = ic.local_filesystem_storage(str(repo))
    containers = declared_containers(ic.Repository.fetch_config(storage))  # exactly what it declares
    assert containers == ([f"file://{nwb3[name].parent.resolve()}/"] if summary["chunks_referenced"] else [])
    r = ic.Repository.open(storage, authorize_virtual_chunk_access=credentials_for(containers, None) or None)
    store = r.readonly_session(branch="main").store
    _io, nwb, caught = nwb_read(None, store=store)
    assert caught == [], caught
    n = nwbcompare.assert_same_nwb(hdf5_nwb(nwb3[name]), nwb)
    assert n > (500 if name == "main" else 20)
    if name == "main":  # and through refindex.open_nwb at a group of a repository
        refindex.scan_to_icechunk(nwb3[name], repo, group="sessions/main")
        nwb2 = refindex.open_nwb(repo, group="sessions/main")
        assert nwbcompare.assert_same_nwb(hdf5_nwb(nwb3[name]), nwb2) == n


# ---------------------------------------------------------------- S3 (moto)


def _s3(opts):
    import s3fs

    fs = s3fs.S3FileSystem(**opts)
    for bucket in ("ic-src", "ic-repo"):
        if not fs.exists(bucket):
            fs.mkdir(bucket)
    return fs


def test_s3_repository_and_sources(tmp_path):
    with moto_s3() as opts:
        fs = _s3(opts)
        for i, name in enumerate(("a.h5", "b.h5")):
            make_file(tmp_path / name, 1.0 + i)
            fs.put_file(str(tmp_path / name), f"ic-src/data/{name}")
        repo = "s3://ic-repo/repos/r1"
        s = refindex.scan_to_icechunk("s3://ic-src/data/a.h5", repo, group="a", storage_options=opts, **REFERENCED)
        assert s["containers"] == ["s3://ic-src/"] and s["source"]["etag"]
        g = refindex.open(repo, group="a", storage_options=opts)
        assert_reads_like_h5py(g, tmp_path / "a.h5")
        report = refindex.verify(tmp_path / "a.h5", IcechunkIndex(repo, group="a", storage_options=opts),
                                 check_source=False)
        assert report.ok and report.count("exact") == 5
        # a scan failing half-way (an attribute Icechunk cannot hold) leaves the history unchanged
        make_file(tmp_path / "nan.h5", nan_attr=True)
        fs.put_file(str(tmp_path / "nan.h5"), "ic-src/data/nan.h5")
        before = history(repo, opts)
        with pytest.raises(refindex.UnsupportedError, match="resolution"):
            refindex.scan_to_icechunk("s3://ic-src/data/nan.h5", repo, group="nan", storage_options=opts)
        assert history(repo, opts) == before
        # two scans committing into the same repository at once (different groups): both land
        errors: list[BaseException] = []
        barrier = threading.Barrier(2)

        def scan(name: str) -> None:
            try:
                barrier.wait()
                refindex.scan_to_icechunk(f"s3://ic-src/data/{name}", repo, group=f"together/{name[0]}",
                                          storage_options=opts, **REFERENCED)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=scan, args=(n,)) for n in ("a.h5", "b.h5")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(history(repo, opts)) == len(before) + 2
        for name in ("a", "b"):
            assert_reads_like_h5py(refindex.open(repo, group=f"together/{name}", storage_options=opts),
                                   tmp_path / f"{name}.h5")
        assert_reads_like_h5py(refindex.open(repo, group="a", storage_options=opts), tmp_path / "a.h5")


# ---------------------------------------------------------------- the corpus


@NO_CORPUS
@pytest.mark.parametrize("row", ROWS, ids=[r["relpath"] for r in ROWS])
def test_corpus_icechunk_reads_like_v2(row, tmp_path):
    """Plain zarr (zarr_format=3) over an Icechunk repository of each corpus file gives exactly
    the v2 index's values (one scan makes both), array by array."""
    from corpus import CORPUS

    path = CORPUS / row["relpath"]
    if row["notes"].startswith("NOT HDF5"):
        with pytest.raises(refindex.NotHDF5Error):
            refindex.scan_to_icechunk(path, tmp_path / "repo")
        return
    opts = ScanOptions(on_unsupported="skip")
    scanned = pipeline.scan_source(str(path), opts)
    t2 = pipeline.prepare_tree(copy.deepcopy(scanned), opts)
    t3 = pipeline.prepare_tree(scanned, opts.but(zarr_format=3))
    assert t3.skipped == t2.skipped  # the same datasets and attributes skipped, with the same reasons
    pipeline.check_strict_attributes(t3, opts, str(path))
    # Icechunk's strict-JSON refusals come on top, attributes only
    assert t3.skipped[:len(t2.skipped)] == t2.skipped
    assert all("NaN" in s["reason"] for s in t3.skipped[len(t2.skipped):])
    formats.icechunk.write_icechunk(t3, IcechunkTarget(str(tmp_path / "repo"), group="f"))
    a2 = all_arrays(open2(roundtrip(formats.to_refs(t2))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a3 = all_arrays(refindex.open(tmp_path / "repo", group="f"))
    assert set(a2) == set(a3)
    for name in sampled(list(a2)):  # files of thousands of arrays: test_corpus and test_v3 read every one
        for x2, x3 in test_v3._read_both(a2[name], a3[name]):
            assert_same_as_v2(x2, x3, f"{row['relpath']}:{name}")


# ---------------------------------------------------------------- batch: many files, one repository


def _batch_inputs(folder):
    """Three HDF5 files (one in a subfolder, one with a space in its name) and one that is not HDF5."""
    (folder / "sub").mkdir(parents=True)
    files = {"a": folder / "a.h5", "b": folder / "sub" / "b c.h5", "c": folder / "sub" / "c.h5"}
    for i, path in enumerate(files.values()):
        make_file(path, 1.0 + i)
    (folder / "notes.h5").write_bytes(b"these are notes, not HDF5\n" * 40)
    return files


def _plain_zarr(repo, group: str) -> zarr.Group:
    """The group through zarr alone, on a read-only session authorizing what the repository declares."""
    import icechunk as ic

    from refindex.formats.icechunk import credentials_for, declared_containers

    storage = ic.local_filesystem_storage(str(repo))
    containers = declared_containers(ic.Repository.fetch_config(storage))
    r = ic.Repository.open(storage, authorize_virtual_chunk_access=credentials_for(containers, None))
    return zarr.open_group(r.readonly_session(branch="main").store, path=group.strip("/"), mode="r", zarr_format=3)


def _tip(repo):
    import icechunk as ic

    return next(iter(ic.Repository.open(ic.local_filesystem_storage(str(repo))).ancestry(branch="main")))


def test_batch_into_one_repository_resumes_and_reindexes_only_what_changed(tmp_path):
    from refindex.batch import read_manifest, run_batch

    files = _batch_inputs(tmp_path / "in")
    repo = tmp_path / "repo"
    report = run_batch(str(tmp_path / "in" / "**" / "*.h5"), output=repo, format="icechunk", workers=2,
                       progress=False, **REFERENCED)
    by = {r.source: r for r in report.results}
    assert [r.source for r in report.failed] == [str(tmp_path / "in" / "notes.h5")]
    assert "not an HDF5 file" in report.failed[0].error and "notes.h5" in report.failed[0].error
    groups = {k: by[str(p)].group for k, p in files.items()}
    assert groups == {"a": "/a.h5", "b": "/sub/b_c.h5", "c": "/sub/c.h5"}
    assert all(by[str(p)].status == "indexed" and by[str(p)].chunks > 10 for p in files.values())
    assert len(history(str(repo))) == 2  # the repository's first commit and the batch's one
    tip = _tip(repo)
    meta = tip.metadata["refindex"]
    assert set(meta["groups"]) == set(groups.values())  # nothing of the file that failed
    inputs = tmp_path.resolve() / "in"
    assert meta["containers"] == [f"file://{inputs}/", f"file://{inputs}/sub/"] == report.extra["containers"]
    assert report.extra["snapshot"] == tip.id and "3 files" in tip.message
    for key, path in files.items():
        rec = meta["groups"][groups[key]]
        assert rec["input"] == str(path) and rec["source"]["size"] == path.stat().st_size
        assert rec["source"]["mtime"] is not None and rec["fingerprint"] == by[str(path)].options
        assert rec["containers"] == [f"file://{path.parent.resolve()}/"]
        assert_reads_like_h5py(refindex.open(repo, group=groups[key]), path)
        assert_reads_like_h5py(_plain_zarr(repo, groups[key]), path)
    assert set(_plain_zarr(repo, "/")) == {"a.h5", "sub"}
    rows = read_manifest(str(tmp_path / "refindex-manifest-repo.jsonl"))
    assert {s: r["status"] for s, r in rows.items()} == {str(p): "indexed" for p in files.values()} | {
        str(tmp_path / "in" / "notes.h5"): "failed"}

    # a re-run: every file unchanged, nothing committed
    again = run_batch(str(tmp_path / "in" / "**" / "*.h5"), output=repo, format="icechunk", workers=2,
                      progress=False, **REFERENCED)
    assert sorted(r.source for r in again.up_to_date) == sorted(str(p) for p in files.values())
    assert len(again.failed) == 1 and again.extra["snapshot"] is None
    assert len(history(str(repo))) == 2

    # one source modified: only that one is scanned again, in one new commit
    make_file(files["c"], 7.0)
    third = run_batch(str(tmp_path / "in" / "**" / "*.h5"), output=repo, format="icechunk", workers=0,
                      progress=False, **REFERENCED)
    assert [r.source for r in third.indexed] == [str(files["c"])] and len(third.up_to_date) == 2
    assert len(history(str(repo))) == 3 and set(_tip(repo).metadata["refindex"]["groups"]) == {"/sub/c.h5"}
    for key, path in files.items():
        assert_reads_like_h5py(refindex.open(repo, group=groups[key]), path)
    # other scan options: a different fingerprint, everything is scanned again
    fourth = run_batch([str(p) for p in files.values()], output=repo, format="icechunk", workers=0, progress=False)
    assert len(fourth.indexed) == 3 and [r.group for r in fourth.indexed] == list(groups.values())


def test_batch_file_failing_half_way_through_its_write_leaves_nothing_of_itself(tmp_path, monkeypatch):
    """A write that fails after some of a file's documents and references went in: that file is reported
    failed, its group keeps what the branch held, the other files land; when none lands, no commit."""
    from refindex.batch import run_batch

    files = _batch_inputs(tmp_path / "in")
    repo = tmp_path / "repo"
    run_batch([str(files["a"]), str(files["b"])], output=repo, format="icechunk", workers=0, progress=False)
    before = history(str(repo))
    make_file(files["a"], 9.0)
    make_file(files["b"], 8.0)
    real = formats.icechunk.write_refs

    def failing(store, path, *a, **kw):  # refindex's own step, after the group's documents went in
        if path.startswith("a.h5/sub"):
            raise refindex.RefindexError("injected failure", path="/" + path)
        return real(store, path, *a, **kw)

    monkeypatch.setattr(formats.icechunk, "write_refs", failing)
    report = run_batch([str(p) for p in files.values()], output=repo, format="icechunk", workers=0,
                       progress=False, **REFERENCED)
    assert [r.source for r in report.failed] == [str(files["a"])] and "injected failure" in report.failed[0].error
    assert len(report.indexed) == 2 and len(history(str(repo))) == len(before) + 1
    assert set(_tip(repo).metadata["refindex"]["groups"]) == {"/sub/b_c.h5", "/sub/c.h5"}
    assert_reads_like_h5py(refindex.open(repo, group="sub/b_c.h5"), files["b"])
    assert_reads_like_h5py(refindex.open(repo, group="sub/c.h5"), files["c"])
    with pytest.raises(refindex.StaleIndexError):  # the old index of a.h5 is still there, whole, and stale
        refindex.open(repo, group="a.h5")
    old = refindex.open(repo, group="a.h5", check_source=False)
    assert set(old) == {"x", "sparse", "scalar", "text", "sub"} and old["sub/y"].shape == (10, 100)
    # nothing succeeds: nothing is committed
    none = run_batch([str(files["a"]), str(tmp_path / "in" / "notes.h5")], output=repo, format="icechunk",
                     workers=0, progress=False, **REFERENCED)
    assert len(none.failed) == 2 and none.extra["snapshot"] is None
    assert len(history(str(repo))) == len(before) + 1


def test_batch_on_a_dask_local_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    from refindex.batch import run_batch

    _batch_inputs(tmp_path / "in")
    repo = tmp_path / "repo"
    with distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        report = run_batch(str(tmp_path / "in" / "**" / "*.h5"), output=repo, format="icechunk", dask=client,
                           progress=False)
    assert len(report.indexed) == 3 and len(report.failed) == 1 and len(history(str(repo))) == 2
    for r in report.indexed:
        assert_reads_like_h5py(refindex.open(repo, group=r.group), r.source)
        assert_reads_like_h5py(_plain_zarr(repo, r.group), r.source)


def test_batch_cli_into_icechunk(tmp_path, capsys):
    from refindex.cli import main as cli_main

    files = _batch_inputs(tmp_path / "in")
    repo = tmp_path / "repo"
    pattern = str(tmp_path / "in" / "**" / "*.h5")
    assert cli_main(["batch", pattern, "--format", "icechunk", "-o", str(repo), "--combine", "all.json"]) == 2
    assert "--combine" in capsys.readouterr().err and not repo.exists()
    assert cli_main(["batch", pattern, "--format", "icechunk", "--no-progress"]) == 2
    assert "needs output" in capsys.readouterr().err
    code = cli_main(["batch", pattern, "--format", "icechunk", "-o", str(repo), "--workers", "0", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "notes.h5" in err and "3 indexed" in err and "committed" in err
    for path in files.values():
        assert_reads_like_h5py(refindex.open(repo, group="/" + str(path.relative_to(tmp_path / "in")).replace(
            " ", "_")), path)
    code = cli_main(["batch", pattern, "--format", "icechunk", "-o", str(repo), "--workers", "0", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "3 up to date" in err and "nothing committed" in err


def test_batch_check_reads_each_group_back_from_the_branch(tmp_path):
    from refindex.batch import run_batch

    files = _batch_inputs(tmp_path / "in")
    repo = tmp_path / "repo"
    refindex.scan_to_icechunk(files["a"], repo, group="model")
    template = refindex.object_model(IcechunkIndex(str(repo), group="model"), depth=1)
    report = run_batch([str(p) for p in files.values()], output=repo, format="icechunk", workers=0,
                       progress=False, check=template)
    assert report.ok and all(r.check == {"ok": True, "differences": []} for r in report.results)
    template["members"]["required_too"] = copy.deepcopy(template["members"]["x"])
    again = run_batch([str(p) for p in files.values()], output=repo, format="icechunk", workers=0,
                      progress=False, check=template)
    assert len(again.up_to_date) == 3 and len(again.check_failed) == 3 and not again.ok
    assert all("required_too" in json.dumps(r.check) for r in again.check_failed)
