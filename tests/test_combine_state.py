"""Appending to a combined dataset reads only new and changed files' indexes: the combine's saved state.

Each case runs :func:`refindex.run_batch` with ``--combine`` twice (a first archive, then more files)
and compares the appended output with a full run over all files into another output: xarray
(default decoding) ``assert_identical`` to ``open_mfdataset`` over the files, and the references
themselves equal (JSON: the reference dicts; parquet: every record's rows; Icechunk: every chunk's
bytes and the virtual chunk locations).  The old files' indexes are overwritten with garbage before
the append: it succeeds only because they are not read again (without a state the same run fails on
them).  A state that does not match (deleted, damaged, another refindex version, the output edited)
is a full rebuild with the same result.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import warnings

import numpy as np
import pytest

import refindex
from refindex.batch import combine_indexes

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")
pytest.importorskip("h5netcdf")


def dataset(start: str, seed: int, n: int = 4) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    times = pd.date_range(start, periods=n)
    return xr.Dataset({"temp": (("time", "x"), rng.standard_normal((n, 5))),
                       "count": (("time",), np.arange(n, dtype="i4") + seed),
                       "mask": (("x",), rng.integers(0, 2, 5).astype("i1"))},
                      coords={"time": times, "x": np.arange(5)}, attrs={"title": f"file {seed}"})


def write(folder, parts: dict[str, xr.Dataset]) -> list[str]:
    """Each dataset as netCDF-4 (its own time units, xarray's default); ``temp`` as byte ranges of the file."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, ds in parts.items():
        p = folder / name
        ds.to_netcdf(p, engine="h5netcdf", encoding={"temp": {"chunksizes": (4, 5), "zlib": True}})
        out.append(str(p))
    return sorted(out)


def batch(paths, out, idx, **kw):
    return refindex.run_batch(paths, output=str(idx), workers=0, progress=False, combine=str(out),
                              split_walk=False, **kw)


def on_files(paths):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return xr.open_mfdataset(paths, engine="h5netcdf", combine="by_coords").load()


def opened(out):
    return xr.open_zarr(refindex.open(str(out)).store, consolidated=not os.path.basename(out) == "repo").load()


def references(out) -> dict:
    """Every reference of a combined JSON or parquet output (metadata documents parsed)."""
    out = str(out)
    if out.endswith(".json"):
        with open(out) as fh:
            refs = json.load(fh)["refs"]
        return {k: json.loads(v) if k.rsplit("/", 1)[-1].startswith(".") else v for k, v in refs.items()}
    import pyarrow.parquet as pq

    with open(os.path.join(out, ".zmetadata")) as fh:
        got: dict = {"metadata": json.load(fh)["metadata"]}
    for path in sorted(glob.glob(os.path.join(out, "*", "refs.*.parq"))):
        got[os.path.relpath(path, out)] = pq.read_table(path).to_pylist()
    return got


def spoil_indexes(idx) -> int:
    """Overwrite every per-file index with bytes no reader takes (they stay, so the batch finds them), of its
    size and mtime: the state knows an index by those (as the manifest knows a source), not by reading it."""
    found = glob.glob(os.path.join(str(idx), "**", "*.refs.json"), recursive=True)
    for p in found:
        st = os.stat(p)
        with open(p, "wb") as fh:
            fh.write(b"not an index".ljust(st.st_size, b" "))
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    return len(found)


def archive(tmp_path):
    first = write(tmp_path / "nc", {"b.nc": dataset("2000-01-05", 1), "c.nc": dataset("2000-01-09", 2),
                                    "d.nc": dataset("2000-01-13", 3)})
    # appended: one before every old file (it becomes the earliest: its attributes and coordinates win) and one after
    more = write(tmp_path / "nc", {"a.nc": dataset("2000-01-01", 0), "e.nc": dataset("2000-01-17", 4)})
    return first, sorted(first + more)


@pytest.mark.parametrize("name", ["all.json", "all.parq"])
def test_append_reads_only_new_indexes_and_equals_a_full_run(tmp_path, name):
    first, every = archive(tmp_path)
    out, idx = tmp_path / name, tmp_path / "idx"
    assert batch(first, out, idx).extra["combine"]["indexes_read"] == 3
    assert spoil_indexes(idx) == 3  # the old files' indexes can no longer be read
    report = batch(every, out, idx)
    assert [r.status for r in report.results] == ["indexed", "up_to_date", "up_to_date", "up_to_date", "indexed"]
    assert report.extra["combine"] == {"state": "used", "indexes_read": 2, "from_state": 3}
    full = batch(every, tmp_path / ("full-" + name), tmp_path / "idx-full")
    assert full.extra["combine"]["indexes_read"] == 5
    assert references(out) == references(tmp_path / ("full-" + name))
    xr.testing.assert_identical(opened(out), on_files(every))
    # the same append without the state reads the old indexes, and fails on them
    state = glob.glob(str(tmp_path / ".all.json.combine-state.npz")) + glob.glob(str(out / ".combine-state.npz"))
    os.remove(state[0])
    with pytest.raises(refindex.RefindexError, match="cannot read the index to combine it"):
        batch(every, out, idx)


def test_the_state_keeps_a_coordinate_every_file_repeats_once(tmp_path):
    """Each file's index holds its ``x`` coordinate inline (256 bytes, the same in every file, as lat/lon in an
    archive): the state keeps those bytes once, not once a file (the coordinator held them all: 2 KB a file in
    P9's archive), and an append from that state is still the full run's dataset, the earliest file new."""
    x = np.arange(32.0)

    def grid(start: str, seed: int) -> xr.Dataset:
        rng = np.random.default_rng(seed)
        return xr.Dataset({"temp": (("time", "x"), rng.standard_normal((4, 32)))},
                          coords={"time": pd.date_range(start, periods=4), "x": x})

    first = write(tmp_path / "nc", {f"f{i}.nc": grid(f"2000-02-{1 + 4 * i:02d}", i) for i in range(1, 4)})
    every = sorted(first + write(tmp_path / "nc", {"f0.nc": grid("2000-01-28", 0)}))
    out, idx = tmp_path / "all.parq", tmp_path / "idx"
    batch(first, out, idx)
    with np.load(out / ".combine-state.npz") as z:
        assert bytes(z["inline"]).count(x.tobytes()) == 1
    assert spoil_indexes(idx) == 3
    assert batch(every, out, idx).extra["combine"] == {"state": "used", "indexes_read": 1, "from_state": 3}
    xr.testing.assert_identical(opened(out), on_files(every))
    full = batch(every, tmp_path / "full.parq", tmp_path / "idx-full")
    assert references(out) == references(tmp_path / "full.parq")


def test_a_changed_file_is_read_again_even_when_its_index_is_up_to_date(tmp_path):
    """The state's digest of a file is used only for the file it saw: here the file changed and a batch
    without --combine re-indexed it, so the combined run finds every index up to date."""
    first, _ = archive(tmp_path)
    out, idx = tmp_path / "all.json", tmp_path / "idx"
    batch(first, out, idx)
    write(tmp_path / "nc", {"c.nc": dataset("2000-01-09", 7)})  # other values (held inline), the same steps
    again = refindex.run_batch(first, output=str(idx), workers=0, progress=False, split_walk=False)
    assert [r.status for r in again.results] == ["up_to_date", "indexed", "up_to_date"]
    report = batch(first, out, idx)
    assert {r.status for r in report.results} == {"up_to_date"}
    assert report.extra["combine"] == {"state": "used", "indexes_read": 1, "from_state": 2}
    xr.testing.assert_identical(opened(out), on_files(first))


def rewrite_index_same_size_and_second(index: str, old: bytes, new: bytes) -> None:
    """Write ``index`` again with ``old`` replaced by ``new`` (of its length): the same size, and an mtime in the
    same second as before (a microsecond off): what a store showing whole seconds could not tell apart."""
    st = os.stat(index)
    with open(index, "rb") as fh:
        data = fh.read()
    assert len(old) == len(new) and data.count(old) == 1
    with open(index, "wb") as fh:
        fh.write(data.replace(old, new))
    ns = st.st_mtime_ns + (1000 if st.st_mtime_ns % 10**9 < 10**9 - 1000 else -1000)
    os.utime(index, ns=(st.st_atime_ns, ns))
    assert os.path.getsize(index) == st.st_size and os.stat(index).st_mtime_ns // 10**9 == st.st_mtime_ns // 10**9


def test_an_index_written_again_with_its_file_unchanged_is_read_again(tmp_path):
    """The state keeps which index of a file it read (the index's size and ETag or mtime, taken just before
    reading it), not only the manifest row's: an index written again since (here by hand, outside any batch:
    the manifest still says the old one) with its source untouched, the same size and an mtime in the same
    second, its inline ``count`` values changed, is read again by the append.  Its output equals a first
    combine over the indexes as they are now, and shows the new values."""
    first, _ = archive(tmp_path)
    out, idx = tmp_path / "all.json", tmp_path / "idx"
    batch(first, out, idx)
    old = np.arange(2, 6, dtype="<i4")  # c.nc's count (seed 2), held inline in its index
    new = old * 10
    rewrite_index_same_size_and_second(str(idx / "c.nc.refs.json"), base64.b64encode(old.tobytes()),
                                       base64.b64encode(new.tobytes()))
    report = batch(first, out, idx)
    assert {r.status for r in report.results} == {"up_to_date"}
    assert report.extra["combine"] == {"state": "used", "indexes_read": 1, "from_state": 2}
    now = tmp_path / "now.json"
    assert batch(first, now, idx).extra["combine"]["indexes_read"] == 3  # a first combine: every index as it is
    assert references(out) == references(now)
    got = opened(out)
    np.testing.assert_array_equal(got["count"].sel(time=slice("2000-01-09", "2000-01-12")).values, new)
    on = on_files(first)  # everything else is still the files' own
    xr.testing.assert_identical(got.drop_vars("count"), on.drop_vars("count"))
    np.testing.assert_array_equal(got["count"].values, np.concatenate([on["count"].values[:4], new,
                                                                       on["count"].values[8:]]))


@pytest.mark.parametrize("spoil", ["deleted", "damaged", "other refindex", "output edited", "other mode"])
def test_a_state_that_does_not_match_is_a_full_rebuild(tmp_path, spoil, monkeypatch, capsys):
    first, every = archive(tmp_path)
    out, idx = tmp_path / "all.json", tmp_path / "idx"
    batch(first, out, idx)
    state = tmp_path / ".all.json.combine-state.npz"
    kw = {}
    if spoil == "deleted":
        state.unlink()
    elif spoil == "damaged":
        state.write_bytes(state.read_bytes()[:200])
    elif spoil == "other refindex":
        monkeypatch.setattr(refindex, "__version__", refindex.__version__ + ".later")
    elif spoil == "output edited":
        with open(out, "a") as fh:
            fh.write(" ")
    else:
        kw["combine_mode"] = "nested"
    capsys.readouterr()
    report = batch(every, out, idx, **kw)
    assert report.extra["combine"]["state"].startswith("full rebuild")
    assert report.extra["combine"]["indexes_read"] == 5
    assert "full rebuild" in capsys.readouterr().err
    full = tmp_path / "full.json"
    batch(every, full, tmp_path / "idx-full", **kw)
    assert references(out) == references(full)
    assert batch(every, out, idx, **kw).extra["combine"] == {"state": "used", "indexes_read": 0, "from_state": 5}


def test_a_vanished_input_fails_naming_it(tmp_path):
    first, _ = archive(tmp_path)
    out, idx = tmp_path / "all.parq", tmp_path / "idx"
    batch(first, out, idx)
    before = references(out)
    os.remove(first[1])
    with pytest.raises(refindex.RefindexError, match=r"1 input\(s\) of the previous run are gone \(.*c\.nc"):
        batch([first[0], first[2]], out, idx)
    assert references(out) == before
    # --force combines anew without it (the hole along time is then the user's choice)
    forced = batch([first[0], first[2]], out, idx, force=True)
    assert forced.extra["combine"]["state"] == "not used (--force)"


def chunks_of(repo) -> tuple[dict, set]:
    """Every array's metadata and bytes (virtual chunks read from their files), and the virtual chunk locations."""
    import icechunk
    import zarr

    group = zarr.open_group(refindex.open(str(repo)).store, mode="r")
    arrays = {name: (arr.metadata.to_dict(), arr[...].tobytes()) for name, arr in group.arrays()}
    session = icechunk.Repository.open(icechunk.local_filesystem_storage(str(repo))).readonly_session("main")
    return arrays, set(session.all_virtual_chunk_locations())


def test_icechunk_append_reads_only_new_indexes_and_equals_a_full_run(tmp_path):
    pytest.importorskip("icechunk")
    first, every = archive(tmp_path)
    repo, idx = tmp_path / "repo", tmp_path / "idx"
    kw = {"format": "icechunk", "inline_threshold": 0, "inline_dataset_threshold": 0}  # chunks held virtually
    batch(first, repo, idx, **kw)
    spoil_indexes(idx)
    report = batch(every, repo, idx, **kw)
    assert report.extra["combine"] == {"state": "used", "indexes_read": 2, "from_state": 3}
    assert (tmp_path / ".repo.combine-state.npz").is_file()
    xr.testing.assert_identical(opened(repo), on_files(every))
    full = tmp_path / "full" / "repo"
    batch(every, full, tmp_path / "idx-full", **kw)
    a, b = chunks_of(repo), chunks_of(full)
    assert a == b and a[1]
    # a commit by someone else: the state's snapshot is no longer the branch's tip, so the run reads every
    # index again (and meets the spoiled ones)
    import icechunk
    import zarr

    r = icechunk.Repository.open(icechunk.local_filesystem_storage(str(repo)))
    session = r.writable_session("main")
    zarr.open_group(session.store).attrs["edited"] = True
    session.commit("an edit")
    with pytest.raises(refindex.RefindexError, match="cannot read the index to combine it"):
        batch(every, repo, idx, **kw)


def test_s3_append_with_its_state_in_the_bucket(tmp_path):
    """Sources, indexes, the combined parquet folder and its state on S3 (moto's server): the object's ETag
    is the output's identity; an append reads the new file's index only and equals the files."""
    from conftest import moto_s3

    first, every = archive(tmp_path)
    with moto_s3("k", "s") as opts:
        import s3fs

        fs = s3fs.S3FileSystem(**opts)
        fs.mkdir("append")
        for p in every:
            if p in first:
                fs.put_file(p, "append/raw/" + os.path.basename(p))
        kw = dict(output="s3://append/idx", storage_options=opts, workers=0, progress=False,
                  combine="s3://append/all.parq", split_walk=False)
        refindex.run_batch("s3://append/raw/*.nc", **kw)
        assert fs.exists("append/all.parq/.combine-state.npz")
        for p in every:
            if p not in first:
                fs.put_file(p, "append/raw/" + os.path.basename(p))
        report = refindex.run_batch("s3://append/raw/*.nc", **kw)
        assert report.extra["combine"] == {"state": "used", "indexes_read": 2, "from_state": 3}
        got = xr.open_zarr(refindex.open("s3://append/all.parq", storage_options=opts, remote_options=opts).store)
        xr.testing.assert_identical(got.load(), on_files(every))


def test_s3_indexes_are_known_by_their_bytes_md5_without_a_head(tmp_path):
    """Per-file indexes in a bucket: the combine keeps which index it read as the size and MD5 of the bytes it
    read (an S3 object's ETag), so it asks no HEAD of any index; an append still reads again an index written
    since with the same size (its inline values changed), from the listing's ETag, and equals the files."""
    from conftest import moto_requests, moto_s3

    first, every = archive(tmp_path)
    with moto_s3("k", "s") as opts:
        import s3fs

        fs = s3fs.S3FileSystem(**opts)
        fs.mkdir("md5")
        for p in first:
            fs.put_file(p, "md5/raw/" + os.path.basename(p))
        kw = dict(output="s3://md5/idx", storage_options=opts, workers=0, progress=False, split_walk=False)
        with moto_requests() as seen:
            alone = refindex.run_batch("s3://md5/raw/*.nc", **kw)  # the indexes, then the combine by itself
            seen.lines.clear()
            combine_indexes(alone, str(tmp_path / "alone.json"), storage_options=opts)
            assert sorted(seen.of("GET", "/md5/idx/")) == [f"GET /md5/idx/{n}.nc.refs.json HTTP/1.1" for n in "bcd"]
            assert seen.of("HEAD") == []  # each index read once, never asked about
            kw["combine"] = str(tmp_path / "all.json")
            refindex.run_batch("s3://md5/raw/*.nc", **kw)  # (its manifest says up to date: every index read)
            old = base64.b64encode(np.arange(2, 6, dtype="<i4").tobytes())  # c.nc's inline count (seed 2)
            new = base64.b64encode((np.arange(2, 6, dtype="<i4") * 10).tobytes())
            data = fs.cat_file("md5/idx/c.nc.refs.json")
            assert data.count(old) == 1
            fs.pipe_file("md5/idx/c.nc.refs.json", data.replace(old, new))  # same size, manifest unchanged
            for p in every:
                if p not in first:
                    fs.put_file(p, "md5/raw/" + os.path.basename(p))
            report = refindex.run_batch("s3://md5/raw/*.nc", **kw)
    assert report.extra["combine"] == {"state": "used", "indexes_read": 3, "from_state": 2}  # a.nc, e.nc, c.nc
    xr.testing.assert_identical(opened(tmp_path / "alone.json"), on_files(first))
    got = opened(tmp_path / "all.json")
    on = on_files(every)
    np.testing.assert_array_equal(got["count"].sel(time=slice("2000-01-09", "2000-01-12")).values,
                                  np.arange(2, 6) * 10)
    xr.testing.assert_identical(got.drop_vars("count"), on.drop_vars("count"))
