"""NWB files of every writer through every reader of an index (issue 22).

The files of tests/nwbwriters.py store what AqNWB, MIES, MatNWB and NeuroConv (with an
extension) store differently from pynwb (plus one real NeuroConv file), and the corpus holds
files of old pynwb versions.
Each is indexed once (v2 and v3 from one scan, and into an Icechunk repository) and read by
hdmf-zarr alone (``NWBZarrV2IO``, ``NWBZarrIO`` over the v3 JSON index and over the Icechunk
session) and by ``refindex.open_nwb``; every NWBFile must equal ``NWBHDF5IO`` on the file,
field by field (tests/nwbcompare.py).  The one file hdmf-zarr alone cannot build from any
zarr store (an unsigned attribute a constructor checks) is proven so, with hdmf-zarr's own
export, and read by ``open_nwb``.
"""

from __future__ import annotations

import copy
import csv
import gc
import json
import warnings

import fsspec
import h5py
import nwbcompare
import numpy as np
import pytest
import zarr

import refindex
from refindex import formats, pipeline
from refindex.codecs import lost_type
from refindex.options import ScanOptions
from refindex.read.nwb._attrtypes import restored

from corpus import CORPUS  # noqa: E402

pynwb = pytest.importorskip("pynwb")
pytest.importorskip("hdmf_zarr")

WRITERS = ["aqnwb", "mies", "matnwb", "neuroconv", "neuroconv_ttl"]
LIGHT = {"neuroconv_ttl"}  # pynwb-written, its family (neuroconv) read every way: v2/v3 JSON only
HDMF_ZARR_CANNOT = {"neuroconv": "incorrect type for 'id'"}  # uint64 attribute, checked by its constructor
_OPEN: list = []


@pytest.fixture(autouse=True)
def _close_ios():
    """Close the ios a test opened and collect garbage in the main thread (see tests/test_nwb.py;
    Icechunk objects too, see conftest's ``collect_in_main_thread``)."""
    start = len(_OPEN)
    yield
    if len(_OPEN) == start:
        return
    while len(_OPEN) > start:
        try:
            _OPEN.pop().close()
        except Exception:  # noqa: BLE001 - an io that failed to open has nothing to close
            pass
    gc.collect()


def _json(refs):
    return json.loads(json.dumps(refs, allow_nan=True))


def _store(refs):
    return zarr.storage.FsspecStore(fsspec.filesystem("reference", fo=refs, asynchronous=True), read_only=True,
                                    path="")


def _kept(io):
    _OPEN.append(io)
    return io


def hdf5(path):
    return _kept(pynwb.NWBHDF5IO(str(path), "r")).read()


def stock_read(kind: str, store):
    """hdmf-zarr alone: ``NWBZarrV2IO`` ("v2") or ``NWBZarrIO`` ("v3") over ``store``."""
    from hdmf_zarr.nwb import NWBZarrIO
    from hdmf_zarr.nwb_zarrv2 import NWBZarrV2IO

    io = _kept((NWBZarrV2IO if kind == "v2" else NWBZarrIO)(path=store, mode="r"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return io.read()


def open_nwb(*args, **kw):
    nwb = refindex.open_nwb(*args, **kw)
    _OPEN.append(nwb.refindex_io)
    return nwb


def both(path):
    """The v2 and v3 JSON indexes of ``path`` from one scan."""
    opts = ScanOptions()
    scanned = pipeline.scan_source(str(path), opts)
    t2 = pipeline.prepare_tree(copy.deepcopy(scanned), opts)
    t3 = pipeline.prepare_tree(scanned, opts.but(zarr_format=3))
    return _json(formats.to_refs(t2)), _json(formats.v3.to_refs(t3))


def icechunk_store(path, repo):
    import icechunk as ic

    from refindex.formats.icechunk import credentials_for, declared_containers

    refindex.scan_to_icechunk(path, repo)
    storage = ic.local_filesystem_storage(str(repo))
    containers = declared_containers(ic.Repository.fetch_config(storage))
    r = ic.Repository.open(storage, authorize_virtual_chunk_access=credentials_for(containers, None) or None)
    return r.readonly_session(branch="main").store


def assert_stock(expected, kind, store, name):
    """hdmf-zarr alone equals NWBHDF5IO, or fails exactly where no zarr store can serve it."""
    if name in HDMF_ZARR_CANNOT:
        with pytest.raises(Exception, match=HDMF_ZARR_CANNOT[name]):
            stock_read(kind, store)
        return
    nwbcompare.assert_same_nwb(expected, stock_read(kind, store))


# ---------------------------------------------------------------- the files are what the writers write


def test_writer_files_hold_the_writers_habits(nwb_files):
    with h5py.File(nwb_files["aqnwb"], "r") as f:
        assert f.id.get_create_plist().get_version()[0] == 3  # superblock of the "latest" format
        for name in ("identifier", "session_description", "session_start_time", "timestamps_reference_time"):
            t = f[name].id.get_type()
            assert f[name].shape == () and h5py.check_string_dtype(f[name].dtype).length == t.get_size()
        ns = f["specifications/core"][next(iter(f["specifications/core"]))]["namespace"]
        assert ns.shape == () and h5py.check_string_dtype(ns.dtype).length is not None
    with h5py.File(nwb_files["mies"], "r") as f:
        assert f["identifier"].shape == (1,)
        assert {f[p].shape for p in _datasets(f["specifications"])} == {(1,)}
        series = f["acquisition/data_00000_AD0"]
        assert series["starting_time"].shape == (1,) and series.attrs["sweep_number"].dtype == np.uint32
        assert series["data"].attrs["IGORWaveType"].dtype == np.int32
    with h5py.File(nwb_files["matnwb"], "r") as f:
        assert isinstance(f["intervals/trials/correct"].id.get_type(), h5py.h5t.TypeEnumID)
        assert f["acquisition/position/data"].attrs["conversion"].dtype == np.float32
        assert f["general/keywords"].shape == (0,) and f["general/keywords"].maxshape == (0,)
    with h5py.File(nwb_files["neuroconv"], "r") as f:
        assert f["processing/behavior/skeleton_instance"].attrs["id"].dtype == np.uint64
        assert f["acquisition/ElectricalSeriesAP/data"].compression == "gzip"


# ---------------------------------------------------------------- every reader, every writer


@pytest.fixture(scope="module")
def indexes(nwb_files):
    """``indexes(name)``: the v2 and v3 JSON indexes of writer file ``name``, made once per module."""
    made: dict[str, tuple[dict, dict]] = {}

    def get(name: str) -> tuple[dict, dict]:
        if name not in made:
            made[name] = both(nwb_files[name])
        return made[name]

    return get


@pytest.mark.parametrize("name", WRITERS)
def test_writer_file_reads_equal_through_every_reader(nwb_files, indexes, tmp_path, name):
    path = nwb_files[name]
    expected = hdf5(path)
    v2, v3 = indexes(name)
    assert not v2["refindex"].get("skipped") and not v3["refindex"].get("skipped")
    assert_stock(expected, "v2", _store(v2), name)
    assert_stock(expected, "v3", _store(v3), name)
    got = {"v2": open_nwb(v2)}
    if name == "mies":  # open_nwb over a v3 JSON index restores types too (uint32 sweep_number, float32 rate)
        got["v3"] = open_nwb(v3)
    if name not in LIGHT:
        repo = tmp_path / "repo"
        assert_stock(expected, "v3", icechunk_store(path, repo), name)
        if name in HDMF_ZARR_CANNOT:  # open_nwb over Icechunk restores types from the commit's record
            got["icechunk"] = open_nwb(repo)
    for nwb in got.values():
        assert nwbcompare.assert_same_nwb(expected, nwb) > 20
        assert_typed_like(expected, nwb, name)


def assert_typed_like(expected, nwb, name: str) -> None:
    """``open_nwb`` hands over attributes with the types ``NWBHDF5IO`` does (what JSON alone loses)."""
    fields = {"neuroconv": [(lambda f: f.processing["behavior"]["skeleton_instance"], "id")],
              "mies": [(lambda f: f.acquisition["data_00001_AD0"], "sweep_number"),
                       (lambda f: f.acquisition["data_00001_AD0"], "rate")],
              "aqnwb": [(lambda f: f.acquisition["array0"], "conversion")]}.get(name, [])
    for where, field in fields:
        want, got = getattr(where(expected), field), getattr(where(nwb), field)
        assert type(want) in (np.uint64, np.uint32, np.float32), (name, field, type(want))
        assert type(got) is type(want) and got == want, (name, field, type(got), type(want))


def _old_pynwb():
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.exists():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"HDF5 corpus not found at {CORPUS}"))]
    with open(manifest) as fh:
        return [r["relpath"] for r in csv.DictReader(fh, delimiter="\t") if r["relpath"].startswith("pynwb/")]


@pytest.mark.parametrize("rel", _old_pynwb())
def test_old_pynwb_files_read_equal_through_v3_and_open_nwb(rel):
    """Files of old pynwb versions (their v2 reads: tests/test_nwb.py) through v3 JSON and ``open_nwb``."""
    path = CORPUS / rel
    expected = hdf5(path)
    v2, v3 = both(path)
    nwbcompare.assert_same_nwb(expected, stock_read("v3", _store(v3)))
    nwbcompare.assert_same_nwb(expected, open_nwb(v2))


# ---------------------------------------------------------------- what the conventions state


def test_fixed_length_text_and_one_element_specs_are_stated_as_text(nwb_files, indexes):
    v2, v3 = indexes("aqnwb")
    for key in ("identifier", "session_description", "session_start_time", "timestamps_reference_time"):
        za = json.loads(v2["refs"][f"{key}/.zarray"])
        assert (za["shape"], za["dtype"], za["filters"][0]["id"]) == ([], "|O", "vlen-utf8"), key
        assert json.loads(v2["refs"][f"{key}/.zattrs"])["zarr_dtype"] == "str"
        d3 = json.loads(v3["refs"][f"{key}/zarr.json"])
        assert (d3["shape"], d3["data_type"], d3["attributes"]["_DTYPE"]) == ([], "string", "str"), key
    g = zarr.open_group(_store(v2), mode="r", zarr_format=2)
    with h5py.File(nwb_files["aqnwb"], "r") as f:
        assert str(g["identifier"][()]) == f["identifier"][()].decode()
        for path in _datasets(f["specifications"]):
            assert g[path].shape == () and str(g[path][()]) == f[path][()].decode(), path
    v2m, v3m = indexes("mies")
    g3 = zarr.open_group(_store(v3m), mode="r", zarr_format=3)
    with h5py.File(nwb_files["mies"], "r") as f:
        for path in _datasets(f["specifications"]):
            assert f[path].shape == (1,) and g3[path].shape == ()
            assert json.loads(str(g3[path][()])) == json.loads(f[path][0]), path
        # other one-element text stays as the file has it (hdmf unpacks it where the spec says scalar)
        assert zarr.open_group(_store(v2m), mode="r", zarr_format=2)["identifier"].shape == (1,)
    # refindex verify: the same text (and MatNWB's empty dataset of maximum shape 0 compares too)
    for name, refs in (("aqnwb", v2), ("aqnwb", v3), ("mies", v3m), ("matnwb", indexes("matnwb")[0])):
        report = refindex.verify(str(nwb_files[name]), refs)
        assert report.ok and report.count("exact") == len(report.results), (name, report.problems()[:3])


def _datasets(group: h5py.Group) -> list[str]:
    out: list[str] = []
    group.visititems(lambda n, o: out.append(f"{group.name}/{n}") if isinstance(o, h5py.Dataset) else None)
    return out


def test_attribute_types_are_recorded_out_of_sight(nwb_files, indexes):
    """The types JSON loses are in the provenance, keyed by path; attributes stay as they were."""
    path = nwb_files["neuroconv"]
    v2, v3 = indexes("neuroconv")
    for refs in (v2, v3):
        types = refs["refindex"]["attribute_types"]
        assert types["/processing/behavior/skeleton_instance"] == {"id": "<u8"}
    assert json.loads(v2["refs"]["processing/behavior/skeleton_instance/.zattrs"])["id"] == 7
    aq = indexes("aqnwb")[0]["refindex"]["attribute_types"]
    assert aq["/acquisition/array0/data"] == {"conversion": "<f4", "offset": "<f4", "resolution": "<f4"}
    assert aq["/acquisition/array0/channel_conversion"] == {"axis": "<i4"}
    plain = _json(refindex.scan(str(path), convention="plain"))
    assert "attribute_types" not in plain["refindex"]  # plain zarr/xarray users: nothing new
    assert json.loads(plain["refs"]["processing/behavior/skeleton_instance/.zattrs"])["id"] == 7


def test_hdmf_zarrs_own_store_of_an_unsigned_attribute_fails_and_open_nwb_reads_it(nwb_files, tmp_path):
    """No zarr store of this file builds with hdmf-zarr alone: not ours, not its own export."""
    from hdmf_zarr.nwb import NWBZarrIO

    path = nwb_files["neuroconv"]
    out = tmp_path / "export.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pynwb.NWBHDF5IO(str(path), "r") as src, NWBZarrIO(str(out), mode="w") as dst:
            dst.export(src_io=src, write_args={"link_data": False})
    with pytest.raises(Exception, match=HDMF_ZARR_CANNOT["neuroconv"]):
        stock_read("v3", zarr.storage.LocalStore(str(out), read_only=True))
    # open_nwb reads it from each index (test_writer_file_reads_equal_through_every_reader) and from the file
    assert nwbcompare.assert_same_nwb(hdf5(path), open_nwb(str(path), cache=False)) > 20


# ---------------------------------------------------------------- the type record itself


@pytest.mark.parametrize("value, recorded", [
    (np.uint64(2**64 - 1), "<u8"), (np.float32(0.1), "<f4"), (np.int32(-3), "<i4"), (np.int64(5), None),
    (np.float64(0.5), None), (np.bool_(True), None), (np.array([1, 2], "u2"), "<u2"),
    (np.array([[0.5, 1.0]]), "<f8"), (np.array([True]), "|b1"), (np.array(["a"], dtype=object), None), ("a", None),
])
def test_lost_types_restore_exactly_from_json(value, recorded):
    assert lost_type(value) == recorded
    if recorded:
        back = restored(json.loads(json.dumps(value.tolist())), recorded)
        assert type(back) is type(value) and back.dtype == value.dtype and np.array_equal(back, value)


def test_a_recorded_type_never_changes_a_value():
    assert restored(300, "|u1") == 300 and type(restored(300, "|u1")) is int
    assert restored({"_REFERENCE": {"path": "/x"}}, "<u8") == {"_REFERENCE": {"path": "/x"}}
    assert restored(0.1, "<f4") == 0.1 and type(restored(0.1, "<f4")) is float  # 0.1 is no float32


def test_open_nwb_follows_external_links_from_an_icechunk_repository(nwb_files, tmp_path):
    """The linked file is indexed on the fly beside the repository's source, as for a JSON index."""
    repo = tmp_path / "repo"
    refindex.scan_to_icechunk(nwb_files["linking"], repo)
    expected = hdf5(nwb_files["linking"])
    nwb = open_nwb(repo)
    assert nwbcompare.assert_same_nwb(expected, nwb) > 20
    assert nwb.acquisition["shared_ts"].data[3].tolist() == expected.acquisition["shared_ts"].data[3].tolist()
