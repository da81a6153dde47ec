"""xarray sees the file (issue 21): with default decoding, xarray over an index shows what xarray over
h5netcdf shows on the HDF5 file: dimensions, coordinates, variables, dtypes, attributes, masks, values
(``tests/xrcompare.py``; never ``decode_cf=False``, which hides exactly what users meet).

* Every corpus file h5netcdf opens, every group of it h5netcdf opens, through the v2 JSON index, by
  the kerchunk route (``"reference://"``, ``engine="zarr"``) and by ``engine="refindex"``; the netCDF files also through the v3
  index, refindex's VirtualiZarr parser and an Icechunk repository.  One scan makes the v2, v3 and
  Icechunk indexes of a file.  What JSON and zarr cannot hold (complex attribute values, compound
  layouts, ragged data...) is named per file in :data:`ACCEPTED`, by kind: any other difference fails.
* Never-written chunks with non-zero fill values read as libhdf5 reads them (zarr == h5py) while
  xarray masks only what ``_FillValue``/``missing_value`` say.
* Dimension names as h5netcdf gives them (linked scales, two scales on one axis, phony dimensions of
  nested groups); netCDF-style attribute values; ``xr.concat`` of two netCDF files along their
  unlimited dimension through the VirtualiZarr parser.
"""

from __future__ import annotations

import copy
import json
import re
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import refindex
from refindex import formats, pipeline
from refindex.options import ScanOptions
from refindex.testing.builders import write_fill_values

from corpus import CORPUS, MISSING, manifest_rows, sampled  # noqa: E402

xr = pytest.importorskip("xarray")
pytest.importorskip("h5netcdf")
import xrcompare  # noqa: E402
from xrcompare import differences, h5netcdf_groups, load_whole, open_engine, open_file, open_reference  # noqa: E402

ROWS = [r for r in manifest_rows() if not r["notes"].startswith("NOT HDF5")]
NO_CORPUS = pytest.mark.skipif(not ROWS, reason=MISSING)


def is_netcdf(row: dict[str, str]) -> bool:
    return row["relpath"].endswith(".nc") or "_NCProperties" in row["notes"]


# What an index cannot show as h5netcdf does, by kind: (pattern every such difference matches, why).
KINDS = {
    "complex attribute": (r"attributes\[.*\]: scalar np\.complex\S*\(.*\) shown as array",
                          "JSON has no complex number: a complex attribute is the pair [real, imag]"),
    "compound layout": (r": dtype (\[.*\]|\|V\d+) != (\[|\{'names'|\|V\d+)|: fields \(.*\) != \(|: field '.*': (values|shape)",
                        "zarr has no structured type with field offsets, sub-array or variable-length "
                        "members: padded compounds keep HDF5's bytes with pad fields, sub-arrays are "
                        "nested records, variable-length members text"),
    "compound attribute": (r"attributes\[.*\]: scalar np\.void\(.*\) shown as mapping",
                           "a compound attribute value is a JSON object"),
    "ragged data": (r"values differ first at flat index \d+: \('str', '\[",
                    "zarr has no ragged arrays: each variable-length sequence is JSON text"),
    "references": (r"values differ first at flat index \d+: \('str', '\{.*\) != \('(Region)?Reference'",
                   "a reference is JSON text of its target (hdmf-zarr's form)"),
    "empty 2-d attribute": (r"attributes\[.*\]: shape \(0,\) != \(0, 0\)", "JSON states no shape for []"),
    "other files": (r"xarray cannot open it: KeyError: .* not found in consolidated metadata",
                    "external links into other files are recorded, not followed into the index"),
    "null dataspace": (r"dimensions \{.*'null_dataspace': 0\} != \{(?!.*null_dataspace)"
                       r"|: dims \('null_dataspace',\) != \(\)|: shape \(0,\) != \(\)$",
                       "a dataset without a dataspace (h5py: Empty) is an empty array on a dimension "
                       "null_dataspace of size 0: every reader reads nothing from it (h5netcdf shows a 0-d "
                       "variable and fails to read it; a 0-d zarr array would read a value the file does not hold)"),
    "undecodable dataset": (r"(dimensions \{.*\} != |data variables: missing)",
                            "a dataset no HDF5 filter here decodes is left out (recorded as skipped)"),
    "hdmf": (r"attributes: missing \[\], extra \[('_ARRAY_DIMENSIONS', )?'(zarr_dtype|_DTYPE)'\]"
             r"|dtype StringDType\(\) != <U"
             r"|attributes\['\.specloc'\]: scalar <HDF5 object reference> shown as text"
             r"|attributes\[.*\]: scalar np\.\w+\(.*\) shown as array \[",
             "HDMF files keep hdmf-zarr's convention (issue 22), not netCDF's view: text as zarr's "
             "variable-length strings, zarr_dtype (v3: _DTYPE, _ARRAY_DIMENSIONS) on every dataset, "
             ".specloc a path, a one-element attribute the array pynwb reads"),
    "reference attribute": (r"attributes\[.*\]: (scalar <HDF5 (object|region) reference> shown as mapping \{'value'"
                            r"|\[+\{'(value|object_id)': .* != array\(\[+(array\(\[)?<HDF5 (object|region) reference>)",
                            "a reference in an attribute is JSON of its target (hdmf-zarr's form): zarr "
                            "has no reference type"),
    "bytes fill in v3": (r"^v3 .*: dtype \|S\d+ != object",
                         "xarray's zarr v3 reader cannot decode a fixed-length bytes _FillValue "
                         "(FillValueCoder: 'Unsupported dtype |S1'): such a variable is not masked"),
}
ACCEPTED: dict[str, set[str]] = {
    "h5py/compound-dtype-complex.h5": {"complex attribute"},
    "hdf5/h5copytst.h5": {"compound attribute", "ragged data", "null dataspace"},
    "hdf5/h5repack_nested_8bit_enum_deflated.h5": {"compound layout"},
    "hdf5/tarrold.h5": {"compound layout"},
    "hdf5/tdatareg.h5": {"references"},
    "hdf5/tnestedcmpddt.h5": {"compound layout"},
    "hdf5/test_ld.h5": {"null dataspace"},
    "hdf5/tnullspace.h5": {"null dataspace"},
    "hdf5/tsaf.h5": {"compound layout"},
    "hdf5/zerodim.h5": {"empty 2-d attribute"},
    "hdf5_plugins/h5ex_d_bitgroom.h5": {"undecodable dataset"},
    "jhdf/compound_datasets_latest.hdf5": {"compound layout"},
    "jhdf/external_link.hdf5": {"other files"},
    "jhdf/isssue-523.hdf5": {"compound layout"},
    "jhdf/test_odd_datasets_latest.hdf5": {"null dataspace"},
    "kerchunk/vlen2.h5": {"compound layout"},
    "hdmf/1.0.5.h5": {"hdmf"},
    "jhdf/test_attribute_latest.hdf5": {"reference attribute"},
    "pyfive/references.hdf5": {"reference attribute", "references"},
    "pynwb/1.0.2_nwbfile.nwb": {"hdmf"},
    "pynwb/1.1.2_nwbfile.nwb": {"hdmf"},
    "pynwb/2.1.0_imageseries_no_data.nwb": {"hdmf"},
    "pynwb/2.2.0_subject_no_age__reference.nwb": {"hdmf"},
    "pyfive/h5netcdf_test.hdf5": {"bytes fill in v3"},
}


# netcdf-c's 2,000-variable file: the parser and Icechunk read the v3 documents this test already
# compares, and would add half a minute to the suite (benchmarks/xarray_parity.py covers them).
V3_ONLY = {"netcdf-c/ref_hdf5_compat1.nc"}


def kinds_of(found: list[str]) -> set[str]:
    """The kinds of ``found`` differences; one no kind explains is returned as itself (and fails)."""
    out = set()
    for d in found:
        kind = next((k for k, (pattern, _) in KINDS.items() if re.search(pattern, d)), None)
        out.add(kind or d)
    return out


def icechunk_opener(tree: Any, where: Path) -> Any:
    """The tree committed to a new Icechunk repository: a function group -> xarray Dataset over it."""
    import icechunk as ic

    from refindex.formats.icechunk import IcechunkTarget, credentials_for, declared_containers

    formats.icechunk.write_icechunk(tree, IcechunkTarget(str(where)))
    storage = ic.local_filesystem_storage(str(where))
    creds = credentials_for(declared_containers(ic.Repository.fetch_config(storage)), None)
    store = ic.Repository.open(storage, authorize_virtual_chunk_access=creds).readonly_session("main").store
    return lambda g: xr.open_dataset(store, engine="zarr", consolidated=False, zarr_format=3,
                                     group=None if g in (None, "/") else g.strip("/"))


def parser_opener(path: str) -> Any:
    """refindex's VirtualiZarr parser over ``path``: a function group -> xarray Dataset over its store."""
    obstore = pytest.importorskip("obstore")
    from obspec_utils.registry import ObjectStoreRegistry

    import refindex.virtualizarr as rv

    store = rv.Parser(on_unsupported="skip")(rv.as_uri(path), ObjectStoreRegistry({"file://": obstore.store.LocalStore()}))
    return lambda g: xr.open_dataset(store, engine="zarr", consolidated=False, zarr_format=3,
                                     group=None if g in (None, "/") else g.strip("/"))


def route_differences(route: str, opener: Any, wants: dict[str, Any], sample: bool = False) -> list[str]:
    """xarray over one route's index against the file's views, group by group (``sample``: values of
    an evenly spaced few hundred variables of a group of thousands, everything else of all)."""
    out = []
    for group, want in wants.items():
        where = f"{route} {group}"
        values = set(sampled(list(want.variables))) if sample else None
        try:
            out += differences(want, opener(None if group == "/" else group), where, values)
        except Exception as e:  # noqa: BLE001 - reported as a difference
            out.append(f"{where}: xarray cannot open it: {type(e).__name__}: {e}")
    return out


@NO_CORPUS
@pytest.mark.parametrize("row", ROWS, ids=[r["relpath"] for r in ROWS])
def test_corpus_file_in_xarray_as_in_h5netcdf(row, tmp_path, monkeypatch):
    """xarray over the index == xarray over h5netcdf, group by group (v2; netCDF files: v3, parser, Icechunk too)."""
    import hdf5plugin  # noqa: F401 - h5netcdf reads the corpus's filters as a user's h5py would

    path = str(CORPUS / row["relpath"])
    monkeypatch.chdir(Path(path).parent)  # external raw data is found beside the file, by both readers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            wants = {"/": load_whole(open_file(path))}
        except Exception as e:  # noqa: BLE001 - files xarray cannot open over h5netcdf either
            pytest.skip(f"h5netcdf cannot open {row['relpath']}: {type(e).__name__}: {e}"[:200])
        for g in h5netcdf_groups(path)[1:]:
            try:
                wants[g] = load_whole(open_file(path, g))
            except Exception:  # noqa: BLE001 - a group xarray cannot open over h5netcdf: nothing to compare
                pass
        opts = ScanOptions(on_unsupported="skip")
        scanned = pipeline.scan_source(path, opts)
        t2 = pipeline.prepare_tree(copy.deepcopy(scanned) if is_netcdf(row) else scanned, opts)
        refs2 = json.loads(json.dumps(formats.to_refs(t2), allow_nan=True))
        found = route_differences("v2", lambda g: open_reference(refs2, g), wants)
        # the documented road (issue 44): engine="refindex", refindex's own store under xarray's zarr backend
        found += route_differences("engine", lambda g: open_engine(refs2, g), wants)
        if is_netcdf(row):
            t3 = pipeline.prepare_tree(scanned, opts.but(zarr_format=3))
            refs3 = json.loads(json.dumps(formats.v3.to_refs(t3), allow_nan=True))
            # the v3 documents' values are test_v3's (array by array against v2's); here a sample of a
            # file of thousands of variables, their metadata and decoding all
            found += route_differences("v3", lambda g: open_reference(refs3, g), wants, sample=True)
            if row["relpath"] not in V3_ONLY:
                found += route_differences("vz", parser_opener(path), wants, sample=True)
                found += route_differences("icechunk", icechunk_opener(t3, tmp_path / "repo"), wants, sample=True)
    expected = ACCEPTED.get(row["relpath"], set())
    # v3-only kinds show on every v3 route
    assert kinds_of([re.sub(r"^(vz|icechunk) ", "v3 ", d) for d in found]) == expected, "\n".join(found[:30])


def test_accepted_kinds_are_all_named():
    """Each kind is accepted for some file (and every file's kinds are exactly those it shows: the
    corpus test compares the sets, so a kind a file no longer shows must leave its entry)."""
    assert set().union(*ACCEPTED.values()) == set(KINDS)
    assert all(row in {r["relpath"] for r in ROWS} for row in ACCEPTED) or not ROWS


# ---------------------------------------------------------------- built files


def views(path: Path, zarr_format: int, **scan: Any) -> tuple[dict, list[str]]:
    """(the index, xarray's differences over it from h5netcdf's view, every group)."""
    refs = json.loads(json.dumps(refindex.scan(str(path), zarr_format=zarr_format, **scan), allow_nan=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = []
        for g in h5netcdf_groups(path):
            found += differences(open_file(path, None if g == "/" else g), open_reference(refs, g), g)
    return refs, found


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_never_written_chunks_read_as_hdf5_fill_and_xarray_masks_what_attributes_say(tmp_path, zarr_format):
    path = tmp_path / "fills.h5"
    write_fill_values(path)
    refs, found = views(path, zarr_format)
    assert not found, found
    report = refindex.verify(str(path), refs)  # zarr == h5py, never-written chunks included
    assert report.ok and report.count("exact") == 11, report.summary()
    if zarr_format == 2:
        zarray = {k.split("/")[0]: json.loads(v) for k, v in refs["refs"].items() if k.endswith("/.zarray")}
        assert zarray["sparse_i4"]["fill_value"] is None and zarray["netcdf_style"]["fill_value"] == -999.0
        assert zarray["attribute_differs"]["fill_value"] == 5 and zarray["text"]["fill_value"] is None
        # each never-written chunk is in the index: zarr reads HDF5's fill there, xarray masks nothing
        assert {"sparse_i4/0.1", "sparse_i4/1.0", "sparse_i4/1.1"} <= set(refs["refs"])
        assert refs["refs"]["sparse_i4/0.1"] == refs["refs"]["sparse_i4/1.1"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = open_reference(refs)
    assert ds["sparse_i4"].dtype == np.int32 and (ds["sparse_i4"].values[2:, :] == -7).all()
    assert np.isnan(ds["netcdf_style"].values[0, 1]) and ds["netcdf_style"].values[0, 2] == 0
    assert np.isnan(ds["netcdf_style"].values[1:]).all()  # never written: HDF5's fill, which _FillValue masks
    assert np.isnan(ds["attribute_differs"].values[0]) and list(ds["attribute_differs"].values[1:]) == [6, 0, 0]
    assert np.isnan(ds["missing_value"].values[0]) and list(ds["missing_value"].values[1:]) == [0, -1, -1, -1, -1]
    assert (ds["never_written"].values == 65535).all() and float(ds["never_written_scalar"]) == 7.5


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_nwb_file_in_xarray_as_in_h5netcdf_but_for_hdmf_zarrs_forms(tmp_path, zarr_format):
    """An NWB file keeps hdmf-zarr's convention, whose forms xarray shows (``zarr_dtype``, text as
    ``StringDType``, ``.specloc`` a path, references as JSON, one-element attributes as arrays); nothing
    else differs from h5netcdf: an integer column holding zeros is not masked (HDF5's fill value was the v2
    ``fill_value``: xarray showed every 0 as NaN, as float64) and dimensions are named as h5netcdf names them.
    Its zarr reads stay h5py's and pynwb's through hdmf-zarr (tests/test_nwb*.py)."""
    pynwb = pytest.importorskip("pynwb")
    from pynwb.testing.mock.file import mock_NWBFile

    path = tmp_path / "zeros.nwb"
    nwb = mock_NWBFile()
    nwb.add_acquisition(pynwb.TimeSeries(name="counts", data=np.array([0, 3, 0, 7], dtype="i4"), unit="n",
                                         timestamps=np.array([0.0, 1.0, 2.0, 3.0])))
    nwb.add_trial_column("score", "an integer column with zeros")
    for i in range(3):
        nwb.add_trial(start_time=float(i), stop_time=i + 0.5, score=i % 2)
    with pynwb.NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)
    refs, found = views(path, zarr_format)
    hdmf = ("hdmf", "reference attribute", "references")
    assert found and kinds_of(found) <= set(hdmf), [d for d in found if kinds_of([d]) - set(hdmf)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts = open_reference(refs, "/acquisition/counts")["data"]
        trials = open_reference(refs, "/intervals/trials")["score"]
    assert counts.dtype == np.int32 and counts.values.tolist() == [0, 3, 0, 7]
    assert trials.values.tolist() == [0, 1, 0]


def test_too_many_unwritten_chunks_keep_hdf5_fill_value(tmp_path, monkeypatch):
    """Past MAX_FILL_CHUNKS unwritten chunks of one array, its v2 fill value stays HDF5's (zarr reads it
    exactly; xarray masks that value) and the provenance names the array."""
    from refindex.conventions import _fills

    monkeypatch.setattr(_fills, "MAX_FILL_CHUNKS", 100)
    path = tmp_path / "fills.h5"
    write_fill_values(path)
    refs, found = views(path, 2)
    assert refs["refindex"]["fill_masked"] == ["/many_unwritten"]
    assert found and all(d.startswith("/: many_unwritten:") for d in found), found
    assert refindex.verify(str(path), refs).ok


def test_dimension_names_as_h5netcdf_gives_them(tmp_path):
    """Linked scales, two scales on one axis (the last one names it), phony dimensions counted over the
    groups down the path, a dimension of a parent group, netCDF's _nc4_non_coord_ variables."""
    path = tmp_path / "dims.h5"
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", data=np.arange(3.0))
        x.make_scale("x")
        x2 = f.create_dataset("x_alt", data=np.arange(3.0) * 2)
        x2.make_scale("x_alt")
        f["x_hard"] = x  # one scale, two names
        f["x_soft"] = h5py.SoftLink("/x")
        v = f.create_dataset("v", data=np.ones(3))
        v.dims[0].attach_scale(x)
        v.dims[0].attach_scale(x2)  # h5netcdf names the axis after the last scale attached
        f.create_dataset("unlabeled", data=np.zeros((2, 4)))
        g = f.create_group("g")
        g.create_dataset("a", data=np.zeros((4, 2, 4)))
        g.create_dataset("b", data=np.zeros(5))
        w = g.create_dataset("w", data=np.zeros(3))
        w.dims[0].attach_scale(x)  # a dimension of the parent group
        g.create_group("h").create_dataset("c", data=np.zeros(2))
        f.create_dataset("_nc4_non_coord_y", data=np.arange(2.0))
    for zarr_format in (2, 3):
        refs, found = views(path, zarr_format)
        assert not found, found
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = open_reference(refs)
        want = open_file(path, "g/h")
    assert ds["v"].dims == ("x_alt",) and "y" in ds.variables
    assert dict(open_reference(refs, "g/h").sizes) == dict(want.sizes)
    assert refs["refindex"]["renamed"] == {"/y": "/_nc4_non_coord_y"}


def test_netcdf_attributes_and_packed_values(tmp_path):
    """netCDF-C's one-element attributes are scalars (``scale_factor`` a number, ``coordinates`` text), text
    variables fixed-width text, an empty attribute empty; packed values equal h5netcdf's in its dtype."""
    netCDF4 = pytest.importorskip("netCDF4")
    path = tmp_path / "packed.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("x", 3)
        nc.createVariable("time", "f8", ("time",))[:] = [0.0, 1.0]
        lat = nc.createVariable("lat", "f4", ("x",))
        lat[:] = [10, 20, 30]
        t = nc.createVariable("t", "i2", ("time", "x"), fill_value=np.int16(-32767))
        t.scale_factor, t.add_offset = np.float32(0.305), np.float32(250.0)
        t.coordinates = "lat"
        t.valid_range = np.array([-1000, 1000], "i2")
        t.set_auto_maskandscale(False)
        t[:] = np.array([[1, -32767, 3], [4, 5, 0]], "i2")
        c = nc.createVariable("c", "f8", ("x",))
        c[:] = [0.0, 1.5, 0.0]  # zeros stay zeros: no _FillValue attribute, nothing masked
        c.setncattr("empty", np.array([], "i4"))
        s = nc.createVariable("name", str, ("x",))
        s[0], s[1], s[2] = "north", "", "Δ"
        nc.title = "packed"
    for zarr_format in (2, 3):
        refs, found = views(path, zarr_format)
        assert not found, found
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds, want = open_reference(refs), open_file(path)
    assert ds["t"].dtype == np.float64 and want["t"].dtype == np.float32  # the one accepted difference
    np.testing.assert_array_equal(ds["t"].values.astype(np.float32), want["t"].values)
    assert "lat" in ds["t"].coords and ds["c"].values.tolist() == [0.0, 1.5, 0.0]
    assert ds["name"].dtype == want["name"].dtype == np.dtype("<U5")


def test_concat_along_the_unlimited_dimension_through_virtualizarr(tmp_path):
    """Two netCDF-4 files (netCDF-C's default chunking: a record variable's chunk longer than the file's
    records) open through the parser and concatenate along time; values equal xarray's over both files."""
    netCDF4 = pytest.importorskip("netCDF4")
    vz = pytest.importorskip("virtualizarr")
    obstore = pytest.importorskip("obstore")
    from obspec_utils.registry import ObjectStoreRegistry

    import refindex.virtualizarr as rv

    paths = [tmp_path / f"part{i}.nc" for i in range(2)]
    for i, p in enumerate(paths):
        with netCDF4.Dataset(p, "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("x", 2)
            t = nc.createVariable("time", "f8", ("time",))
            t.units = "days since 2026-01-01"
            t[:] = np.arange(3.0) + 3 * i
            nc.createVariable("count", "i4", ("time",))[:] = np.arange(3) + 10 * i  # chunk (1024,) > 3 records
            nc.createVariable("temp", "f4", ("time", "x"), fill_value=np.float32(-1))[:] = np.full((3, 2), i, "f4")
        with netCDF4.Dataset(p) as nc:
            assert nc["count"].chunking() == [1024] or nc["count"].chunking()[0] > 3
    reg = ObjectStoreRegistry({"file://": obstore.store.LocalStore()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vdss = [vz.open_virtual_dataset(str(p), parser=rv.Parser(), registry=reg) for p in paths]
        combined = xr.concat(vdss, dim="time", coords="minimal", compat="override", data_vars="minimal")
        assert combined["count"].data.manifest.shape_chunk_grid == (2,)
        refs = combined.vz.to_kerchunk(format="dict", zarr_format=3)
        got = xr.open_dataset("reference://", engine="zarr", backend_kwargs={
            "consolidated": False, "storage_options": {"fo": refs, "remote_protocol": "file"}})
        want = xr.concat([open_file(p) for p in paths], dim="time", coords="minimal", compat="override",
                         data_vars="minimal")
        assert not differences(want, got)
        assert got["count"].values.tolist() == [0, 1, 2, 10, 11, 12] and got["count"].dtype == np.int32


def test_engine_refindex_is_h5netcdfs_view_with_dask_tasks_of_many_chunks(tmp_path):
    """``xr.open_dataset(..., engine="refindex")`` on the HDF5 file (indexed on the fly) and on its index
    shows what h5netcdf shows; with ``chunks={}`` a dask task groups many zarr chunks (not one task per
    chunk), and a point across the series is read in one round trip of the store (issue 44)."""
    import webserver

    path = tmp_path / "series.nc"
    rng = np.random.default_rng(44)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xr.Dataset({"tas": (("time", "lat", "lon"), rng.random((60, 30, 40), dtype="f4"), {"units": "K"})},
                   coords={"time": np.arange(60), "lat": np.linspace(-60, 60, 30)}).to_netcdf(
            path, engine="h5netcdf", encoding={"tas": {"chunksizes": (1, 15, 20)}})
        want = load_whole(open_file(path))
        assert differences(want, load_whole(xr.open_dataset(path, engine="refindex", cache=False))) == []
        with webserver.serve() as server:
            url = server.put("series.nc", path.read_bytes())
            refs = refindex.scan(url)
            assert differences(want, load_whole(open_engine(refs))) == []
            ds = xr.open_dataset(refs, engine="refindex", chunks={}, check_source=False)
            assert ds.tas.data.npartitions < 60 * 4 / 8, ds.tas.chunks  # tasks of many 15x20 chunks
            before = len(server.requests)
            np.testing.assert_array_equal(ds.tas[:, 20, 30].values, want.tas[:, 20, 30].values)
            gets = [r for r in server.requests[before:] if r[0] == "GET"]
    assert 0 < len(gets) <= 4, gets  # every needed chunk of the task at once, merged (one per step without)
