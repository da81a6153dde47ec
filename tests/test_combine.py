"""``refindex batch --combine``: the combined dataset is what ``xr.open_mfdataset`` makes of the files.

Small netCDF-4 files written by xarray (h5netcdf): each case combines them through
:func:`refindex.run_batch` and compares, with ``xr.testing.assert_identical``, the combined
index opened by xarray with default decoding against ``xr.open_mfdataset`` over the files.
Cases: the same units in every file, per-file units (xarray's default: ``days since <first
day>``), many one-step files, ``noleap`` and ``360_day`` calendars, unsorted inputs, hourly and
monthly steps, several variables (coordinates, variables without time, attributes differing
per file), chunks referenced or inline, nested order, JSON and parquet outputs.  Then each
refusal: the error names both files and the difference, and nothing is written.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import refindex
from refindex.cli import main as cli_main

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")
pytest.importorskip("h5netcdf")
pytest.importorskip("cftime")

REFERENCED = {"inline_threshold": 0, "inline_dataset_threshold": 0}  # every chunk a byte range of its file


def dataset(times, seed: int = 0, nx: int = 4, **extra) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    n = len(times)
    ds = xr.Dataset({"temp": (("time", "x"), rng.standard_normal((n, nx)))},
                    coords={"time": times, "x": np.arange(nx)}, attrs={"title": f"file {seed}"})
    for name, var in extra.items():
        ds[name] = var
    return ds


def write(folder, datasets, encoding=None, names=None):
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, ds in enumerate(datasets):
        p = folder / (names[i] if names else f"f{i:03d}.nc")
        ds.to_netcdf(p, engine="h5netcdf", encoding=encoding(i) if callable(encoding) else encoding)
        paths.append(str(p))
    return paths


def combined(paths, out, mode="by_coords", concat_dims=("time",), **scan):
    if mode != "by_coords":
        scan["combine_mode"] = mode
    report = refindex.run_batch(paths, output=str(out.parent / "indexes"), workers=0, progress=False,
                                combine=str(out), concat_dims=concat_dims, split_walk=False, **scan)
    assert report.combined == str(out)
    return xr.open_zarr(refindex.open(str(out)).store)


def on_files(paths, mode="by_coords"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # xarray's notice of its coming defaults
        kw = {"combine": "nested", "concat_dim": "time"} if mode == "nested" else {"combine": "by_coords"}
        return xr.open_mfdataset(paths, engine="h5netcdf", **kw).load()


def assert_as_mfdataset(paths, out, mode="by_coords", **scan):
    got = combined(paths, out, mode, **scan).load()
    want = on_files(paths, mode)
    xr.testing.assert_identical(got, want)
    return got


def days(start, n, freq="D", calendar="standard"):
    if calendar == "standard":
        return pd.date_range(start, periods=n, freq=freq)
    return xr.date_range(start, periods=n, freq=freq, calendar=calendar, use_cftime=True)


# ------------------------------------------------------------------ the same meaning as open_mfdataset
def test_same_units_in_every_file(tmp_path):
    paths = write(tmp_path / "nc", [dataset(days("2000-01-01", 12), 0), dataset(days("2000-01-13", 12), 1)],
                  encoding={"time": {"units": "days since 1990-01-01"}})
    assert_as_mfdataset(paths, tmp_path / "all.json")


def test_per_file_units_the_newcomers_case(tmp_path):
    """Two files of 12 daily steps with xarray's defaults: each says ``days since <its first day>``."""
    paths = write(tmp_path / "nc", [dataset(days("2000-01-01", 12), 0), dataset(days("2000-01-13", 12), 1)],
                  names=["climate1.nc", "climate2.nc"])
    units = {xr.open_dataset(p, engine="h5netcdf").time.encoding["units"] for p in paths}
    assert len(units) == 2  # the files' own units differ
    out = tmp_path / "climate-all.refs.json"
    assert cli_main(["batch", str(tmp_path / "nc" / "climate*.nc"), "--combine", str(out), "--workers", "0",
                     "--no-progress"]) == 0
    got = xr.open_zarr(refindex.open(str(out)).store).load()
    assert got.sizes["time"] == 24
    xr.testing.assert_identical(got, on_files(paths))


def test_many_one_step_files_with_their_own_units_as_parquet(tmp_path):
    steps = days("2000-01-01", 40)
    order = np.random.default_rng(5).permutation(40)  # unsorted inputs
    paths = write(tmp_path / "nc", [dataset(steps[i:i + 1], int(i)) for i in order],
                  names=[f"day{i:03d}.nc" for i in order])
    got = assert_as_mfdataset(paths, tmp_path / "all.parq")
    assert got.sizes["time"] == 40 and (tmp_path / "all.parq" / ".zmetadata").is_file()


@pytest.mark.parametrize("calendar", ["noleap", "360_day"])
def test_non_standard_calendars(tmp_path, calendar):
    paths = write(tmp_path / "nc", [dataset(days("2001-02-25", 6, calendar=calendar), 0),
                                    dataset(days("2001-03-03", 6, calendar=calendar), 1)])
    got = assert_as_mfdataset(paths, tmp_path / "all.json", **REFERENCED)
    assert got.time.values[0].calendar == calendar


def test_unsorted_inputs_hourly_steps(tmp_path):
    parts = [dataset(days(f"2000-01-01T{6 * i:02d}:00", 6, freq="h"), i) for i in range(4)]
    paths = write(tmp_path / "nc", parts[::-1], encoding={"temp": {"chunksizes": (3, 4)}})
    assert_as_mfdataset(paths, tmp_path / "all.json", **REFERENCED)


def test_monthly_steps(tmp_path):
    paths = write(tmp_path / "nc", [dataset(days("2000-01-01", 12, freq="MS"), 0),
                                    dataset(days("2001-01-01", 12, freq="MS"), 1),
                                    dataset(days("2002-01-01", 12, freq="MS"), 2)])
    assert_as_mfdataset(paths, tmp_path / "all.parq", **REFERENCED)


def several(seed, start, n=8):
    times = days(start, n)
    rng = np.random.default_rng(seed)
    return dataset(times, seed, nx=5,
                   precip=(("time", "x"), rng.random((n, 5)).astype("f4"), {"units": "mm", "long_name": f"p{seed}"}),
                   lat=(("x",), np.linspace(-10, 10, 5), {"units": "degrees_north"}),
                   mask=(("x",), rng.integers(0, 2, 5).astype("i1")),
                   level=((), 850.0 + seed),
                   count=(("time",), np.arange(n, dtype="i4") + seed))


def test_several_variables_coordinates_and_attributes(tmp_path):
    """Data variables without time get it (xarray's default data_vars="all"), each step holding its file's
    values; coordinates without time are kept once; attributes are the earliest file's."""
    parts = [several(i, f"2000-0{i + 1}-01").set_coords("lat") for i in range(3)]
    paths = write(tmp_path / "nc", parts[::-1], encoding={"precip": {"chunksizes": (4, 5), "zlib": True}})
    got = assert_as_mfdataset(paths, tmp_path / "all.json", **REFERENCED)
    assert got.mask.dims == ("time", "x") and got.attrs["title"] == "file 0"
    assert_as_mfdataset(paths, tmp_path / "all.parq")  # inline chunks too


def test_nested_keeps_the_input_order(tmp_path):
    paths = write(tmp_path / "nc", [dataset(days("2000-03-01", 4), 0), dataset(days("2000-01-01", 4), 1)])
    got = assert_as_mfdataset(paths, tmp_path / "all.json", mode="nested")
    assert str(got.time.values[0])[:10] == "2000-03-01"
    out = tmp_path / "cli.parq"
    assert cli_main(["batch", *paths, "--combine", str(out), "--combine-mode", "nested", "--workers", "0",
                     "--no-progress"]) == 0
    xr.testing.assert_identical(xr.open_zarr(refindex.open(str(out)).store).load(), on_files(paths, "nested"))


def test_parquet_reads_through_stock_fsspec_and_zarr(tmp_path):
    """No refindex on the read side: fsspec's ``reference://`` over the folder, zarr, xarray."""
    import fsspec
    import zarr

    parts = [several(i, f"2000-0{i + 1}-01").set_coords("lat") for i in range(3)]
    paths = write(tmp_path / "nc", parts)
    out = tmp_path / "all.parq"
    combined(paths, out, record_size=7, **REFERENCED)
    fs = fsspec.filesystem("reference", fo=str(out), remote_protocol="file", asynchronous=True)
    store = zarr.storage.FsspecStore(fs, read_only=True, path="")
    xr.testing.assert_identical(xr.open_zarr(store).load(), on_files(paths))


# ------------------------------------------------------------------ refusals
def refused(tmp_path, datasets, match, encoding=None, out="all.json", **scan):
    paths = write(tmp_path / "nc", datasets, encoding=encoding)
    with pytest.raises(refindex.RefindexError, match=match) as e:
        combined(paths, tmp_path / out, **scan)
    assert not (tmp_path / out).exists()
    return str(e.value)


def test_refused_chunk_shapes(tmp_path):
    text = refused(tmp_path, [dataset(days("2000-01-01", 8), 0), dataset(days("2000-01-09", 8), 1)],
                   r"chunk shape \(4, 4\) vs \(4, 2\)",
                   encoding=lambda i: {"temp": {"chunksizes": (4, 4 if i == 0 else 2)}})
    assert "f000.nc" in text and "f001.nc" in text and "'temp'" in text


def test_refused_chunks_not_aligned_along_time(tmp_path):
    refused(tmp_path, [dataset(days("2000-01-01", 6), 0), dataset(days("2000-01-07", 6), 1)],
            r"f000.nc holds 6 steps \(not a whole number of chunks\)", encoding={"temp": {"chunksizes": (4, 4)}})


def test_refused_codecs(tmp_path):
    refused(tmp_path, [dataset(days("2000-01-01", 4), 0), dataset(days("2000-01-05", 4), 1)], r"'temp': codec",
            encoding=lambda i: {"temp": {"zlib": i == 0, "chunksizes": (4, 4)}}, **REFERENCED)


def test_refused_dtypes(tmp_path):
    refused(tmp_path, [dataset(days("2000-01-01", 4), 0), dataset(days("2000-01-05", 4), 1)],
            r"'temp': dtype '<f4' vs '<f8'", encoding=lambda i: {"temp": {"dtype": "f4" if i == 0 else "f8"}})


def test_refused_fill_values(tmp_path):
    refused(tmp_path, [dataset(days("2000-01-01", 4), 0), dataset(days("2000-01-05", 4), 1)],
            r"'temp': fill value -999.0 vs -1997.0", encoding=lambda i: {"temp": {"_FillValue": -999.0 - 998 * i}})


def test_refused_packing_that_differs(tmp_path):
    refused(tmp_path, [dataset(days("2000-01-01", 4), 0), dataset(days("2000-01-05", 4), 1)],
            r"'temp': attributes xarray decodes with differ.*scale_factor",
            encoding=lambda i: {"temp": {"dtype": "i2", "scale_factor": 0.01 * (i + 1), "_FillValue": -1}})


def test_refused_missing_variable(tmp_path):
    second = dataset(days("2000-01-05", 4), 1)
    second["extra"] = second.temp * 2
    refused(tmp_path, [dataset(days("2000-01-01", 4), 0), second], r"'extra' is in .*f001.nc but missing from .*f000")


def test_refused_overlapping_and_duplicate_steps(tmp_path):
    refused(tmp_path, [dataset(days("2000-01-01", 4), 0), dataset(days("2000-01-03", 4), 1)],
            r"overlapping steps along 'time' \(2000-01-04")
    refused(tmp_path / "dup", [dataset(days("2000-01-01", 4), 0), dataset(days("2000-01-04", 4), 1)],
            r"duplicate steps along 'time'")


def test_refused_unequal_grids(tmp_path):
    other = dataset(days("2000-01-05", 4), 1).assign_coords(x=np.arange(4) + 0.5)
    refused(tmp_path, [dataset(days("2000-01-01", 4), 0).assign_coords(x=np.arange(4.0)), other],
            r"coordinate 'x' has other values \(unequal grids")
    refused(tmp_path / "size", [dataset(days("2000-01-01", 4), 0), dataset(days("2000-01-05", 4), 1, nx=5)],
            r"shape \(4, 4\) vs \(4, 5\) on dimensions other than 'time'")


def test_refused_calendars_that_differ(tmp_path):
    refused(tmp_path, [dataset(days("2000-01-01", 4, calendar="noleap"), 0),
                       dataset(days("2000-01-05", 4, calendar="360_day"), 1)], r"cftime \(noleap\) vs cftime \(360_day\)")


def test_refused_bounds_in_per_file_units(tmp_path):
    def with_bounds(start, seed):
        ds = dataset(days(start, 4), seed)
        ds["time_bnds"] = (("time", "nv"), np.stack([ds.time.values, ds.time.values + np.timedelta64(1, "D")], 1))
        ds.time.attrs["bounds"] = "time_bnds"
        return ds

    warnings.filterwarnings("ignore", "Variable time has datetime type and a bounds", UserWarning)
    refused(tmp_path, [with_bounds("2000-01-01", 0), with_bounds("2000-01-05", 1)],
            r"bounds 'time_bnds' are numbers in those units")


def test_refused_failed_inputs_and_one_dimension_only(tmp_path):
    paths = write(tmp_path / "nc", [dataset(days("2000-01-01", 4), 0)])
    (tmp_path / "nc" / "bad.nc").write_bytes(b"not HDF5")
    with pytest.raises(refindex.RefindexError, match=r"cannot combine: 1 input\(s\) failed \(.*bad.nc"):
        combined([*paths, str(tmp_path / "nc" / "bad.nc")], tmp_path / "all.json")
    with pytest.raises(refindex.RefindexError, match="one dimension"):
        refindex.run_batch(paths, workers=0, progress=False, combine=str(tmp_path / "c.json"),
                           concat_dims=["time", "x"])
    assert not (tmp_path / "all.json").exists()


def test_combined_json_names_its_files(tmp_path):
    paths = write(tmp_path / "nc", [dataset(days("2000-01-01", 4), 0), dataset(days("2000-01-05", 4), 1)])
    out = tmp_path / "all.json"
    combined(paths, out, **REFERENCED)
    refs = json.loads(out.read_text())["refs"]
    assert refs["temp/1.0"][0] == paths[1] and json.loads(refs["time/.zattrs"])["units"] == "days since 2000-01-01"


def test_numbers_not_times_along_the_dimension(tmp_path):
    """A concat coordinate of plain numbers orders the files by itself; other units of it are refused."""
    def depth(start, seed, units="m"):
        ds = dataset(np.arange(start, start + 3.0), seed).rename(time="depth")
        ds.depth.attrs["units"] = units
        return ds

    paths = write(tmp_path / "nc", [depth(3, 1), depth(0, 0)])
    got = combined(paths, tmp_path / "all.json", concat_dims=["depth"]).load()
    xr.testing.assert_identical(got, xr.open_mfdataset(paths, engine="h5netcdf", combine="by_coords").load())
    refused(tmp_path / "km", [depth(0, 0), depth(3, 1, "km")], r"'depth' is stored as <f8 in 'm' vs <f8 in 'km'",
            concat_dims=["depth"])


def test_up_to_date_files_are_combined_too(tmp_path):
    """A re-run finds every index up to date and still combines them (the rows the batch starts with)."""
    paths = write(tmp_path / "nc", [dataset(days("2000-01-01", 4), 0), dataset(days("2000-01-05", 4), 1)])
    combined(paths, tmp_path / "first.json")
    again = refindex.run_batch(paths, output=str(tmp_path / "indexes"), workers=0, progress=False,
                               combine=str(tmp_path / "all.parq"))
    assert {r.status for r in again.results} == {"up_to_date"}
    xr.testing.assert_identical(xr.open_zarr(refindex.open(str(tmp_path / "all.parq")).store).load(),
                                on_files(paths))
    from refindex.batch import combine_indexes  # the same from a finished batch's report

    assert combine_indexes(again, tmp_path / "later.json") == str(tmp_path / "later.json")
    xr.testing.assert_identical(xr.open_zarr(refindex.open(str(tmp_path / "later.json")).store).load(),
                                on_files(paths))


def test_s3_inputs_and_combined_outputs(tmp_path):
    """Sources, per-file indexes and the combined index (JSON and parquet) on S3 (moto server); the time
    values the combine reads come from the objects' byte ranges."""
    from conftest import moto_s3

    paths = write(tmp_path / "nc", [dataset(days("2000-01-05", 4), 1), dataset(days("2000-01-01", 4), 0)])
    with moto_s3("k", "s") as opts:
        import s3fs

        fs = s3fs.S3FileSystem(**opts)
        fs.mkdir("combine")
        for p in paths:
            fs.put_file(p, "combine/raw/" + p.rsplit("/", 1)[-1])
        for out in ("s3://combine/all.json", "s3://combine/all.parq"):
            report = refindex.run_batch("s3://combine/raw/*.nc", output="s3://combine/indexes", storage_options=opts,
                                        workers=0, progress=False, combine=out, split_walk=False, **REFERENCED)
            assert report.combined == out
            got = xr.open_zarr(refindex.open(out, storage_options=opts, remote_options=opts).store).load()
            xr.testing.assert_identical(got, on_files(paths))
        assert not [p for p in fs.find("combine") if ".refindex-" in p]


def test_time_stored_differently_per_file(tmp_path):
    """One file stores time as int64 days, the other as float64 hours with a fill value: both decode, one
    coordinate holds them; a step equal to the fill value (xarray: NaT) is refused."""
    paths = write(tmp_path / "nc", [dataset(days("2000-01-01", 4), 0), dataset(days("2000-01-05", 4), 1)],
                  encoding=lambda i: {"time": {"units": "hours since 2000-01-05", "dtype": "f8", "_FillValue": -1.0}}
                  if i else None)
    assert_as_mfdataset(paths, tmp_path / "all.json")
    refused(tmp_path / "fill", [dataset(days("2000-01-01", 4), 0), dataset(days("2000-01-05", 4), 1)],
            r"f001.nc: 'time' has missing steps",
            encoding=lambda i: {"time": {"units": "hours since 2000-01-05", "_FillValue": 24}} if i else None)


# ------------------------------------------------------------------ one Icechunk dataset, and append
def commits(repo) -> int:
    import icechunk

    r = icechunk.Repository.open(icechunk.local_filesystem_storage(str(repo)))
    return len(list(r.ancestry(branch="main")))


def in_repository(repo):
    return xr.open_zarr(refindex.open(str(repo)).store, consolidated=False).load()


def test_icechunk_one_dataset_appended_by_a_rerun(tmp_path):
    """``format="icechunk", combine=REPO``: one dataset at the repository's root; a re-run with a new file scans
    only it and commits once; a changed file's references are replaced; a vanished input fails naming it."""
    pytest.importorskip("icechunk")
    nc, repo = tmp_path / "nc", tmp_path / "repo"
    paths = write(nc, [dataset(days("2000-01-01", 12), 0), dataset(days("2000-01-13", 12), 1)])
    kw = dict(format="icechunk", combine=str(repo), output=str(tmp_path / "idx"), workers=0, progress=False,
              split_walk=False, **REFERENCED)
    first = refindex.run_batch(paths, **kw)
    assert first.combined == str(repo) and first.extra["snapshot"]
    xr.testing.assert_identical(in_repository(repo), on_files(paths))
    n = commits(repo)
    paths += write(nc, [dataset(days("2000-01-25", 12), 2)], names=["f002.nc"])
    again = refindex.run_batch(paths, **kw)
    assert [r.status for r in again.results] == ["up_to_date", "up_to_date", "indexed"]
    assert commits(repo) == n + 1
    xr.testing.assert_identical(in_repository(repo), on_files(paths))
    write(nc, [dataset(days("2000-01-13", 12), 7)], names=["f001.nc"])  # changed values, same steps
    third = refindex.run_batch(paths, **kw)
    assert [r.status for r in third.results] == ["up_to_date", "indexed", "up_to_date"]
    xr.testing.assert_identical(in_repository(repo), on_files(paths))
    (nc / "f000.nc").unlink()
    with pytest.raises(refindex.RefindexError, match=r"1 input\(s\) of the previous run are gone \(.*f000.nc"):
        refindex.run_batch(paths[1:], **kw)
    assert commits(repo) == n + 2


def test_icechunk_dataset_from_the_command_line_with_inline_chunks(tmp_path):
    pytest.importorskip("icechunk")
    parts = [several(i, f"2000-0{i + 1}-01").set_coords("lat") for i in range(3)]
    paths = write(tmp_path / "nc", parts[::-1])
    repo = tmp_path / "repo"
    assert cli_main(["batch", *paths, "--format", "icechunk", "--combine", str(repo), "-o", str(tmp_path / "idx"),
                     "--workers", "0", "--no-progress"]) == 0
    xr.testing.assert_identical(in_repository(repo), on_files(paths))
