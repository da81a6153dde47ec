"""refindex output is a valid hdmf-zarr (v2 convention) file for HDMF/NWB inputs (issue #3).

Real NWB files are written with pynwb (``tests/nwbfiles.py``), indexed, and read through
the plain consumer path (async ReferenceFileSystem -> zarr FsspecStore -> hdmf-zarr's
``NWBZarrV2IO``); every container and field must equal ``NWBHDF5IO`` on the original
(``tests/nwbcompare.py``), with no skipped entries and no warnings.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import warnings

import fsspec
import h5py
import numpy as np
import pytest
import zarr

import refindex

import nwbcompare  # noqa: E402  (tests/ is on sys.path under pytest)
import nwbfiles  # noqa: E402
from conftest import collect_garbage  # noqa: E402

pynwb = pytest.importorskip("pynwb")
hdmf_zarr = pytest.importorskip("hdmf_zarr")
from hdmf_zarr.nwb_zarrv2 import NWBZarrV2IO  # noqa: E402

from corpus import CORPUS  # noqa: E402


# ---------------------------------------------------------------- helpers


def _roundtrip(refs):
    return json.loads(json.dumps(refs, allow_nan=True))


def index(path, **kw):
    """refindex.scan + JSON round trip (what a consumer of the JSON file gets)."""
    return _roundtrip(refindex.scan(str(path), **kw))


_OPEN_IOS: list = []


@pytest.fixture(autouse=True)
def _close_zarr_ios():
    """Close every NWBZarrV2IO a test opened and collect garbage here, on the main thread.

    Left to the garbage collector, hdmf-zarr's clean-up can run inside zarr's event-loop
    thread during a later read and wait on that same loop: the next test would hang.
    """
    start = len(_OPEN_IOS)  # ios of wider-scoped fixtures (set up before this) stay open
    yield
    while len(_OPEN_IOS) > start:
        try:
            _OPEN_IOS.pop().close()
        except Exception:
            pass
    collect_garbage()  # (cheap: what earlier tests left alive is frozen)


def consumer_read(refs):
    """The consumer path of the issue; returns (io, nwbfile, warnings raised while reading)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fs = fsspec.filesystem("reference", fo=refs, asynchronous=True)
        store = zarr.storage.FsspecStore(fs, read_only=True, path="")
        io = NWBZarrV2IO(path=store, mode="r")
        _OPEN_IOS.append(io)
        nwb = io.read()
    return io, nwb, [f"{w.category.__name__}: {w.message}" for w in caught]


def hdf5_read(path):
    io = pynwb.NWBHDF5IO(str(path), "r")
    return io, io.read()


def assert_clean(io, caught, allowed=()):
    assert io.skipped_entries == []
    bad = [w for w in caught if not any(a in w for a in allowed)]
    assert bad == [], bad


def zattrs(refs, key):
    return json.loads(refs["refs"][key + "/.zattrs"] if key else refs["refs"][".zattrs"])


def zarray(refs, key):
    return json.loads(refs["refs"][key + "/.zarray"])


def array_keys(refs):
    return sorted(k[: -len("/.zarray")] for k in refs["refs"] if k.endswith("/.zarray"))


def assert_hdmf_encoding(refs):
    """Convention checks that hold for every index of an HDMF file."""
    meta = refs["refs"]
    for key in array_keys(refs):
        za, at = zarray(refs, key), zattrs(refs, key)
        assert "zarr_dtype" in at, key
        codecs = [c["id"] for c in (za["filters"] or [])] + ([za["compressor"]["id"]] if za["compressor"] else [])
        assert not {"pickle", "json2", "json", "vlen-array"} & set(codecs), (key, codecs)
        if za["dtype"] == "|O":
            assert za["filters"][0]["id"] in ("vlen-utf8", "vlen-bytes"), key
    root = zattrs(refs, "")
    if "specifications/.zgroup" in meta:
        assert root[".specloc"] == "specifications"
    for k, v in meta.items():
        if k.startswith("specifications/") and not k.rsplit("/", 1)[-1].startswith("."):
            assert isinstance(v, str) and not isinstance(v, list), k  # cached specs are inline


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def nwb_dir(nwb_files):
    return nwb_files


@pytest.fixture(scope="session")
def main_refs(nwb_dir):
    return index(nwb_dir["main"])


@pytest.fixture(scope="session")
def main_read(nwb_dir, main_refs):
    nwbfiles.build_extension(nwb_dir["main"].parent)
    io, nwb, caught = consumer_read(main_refs)
    hio, hnwb = hdf5_read(nwb_dir["main"])
    yield io, nwb, caught, hnwb
    hio.close()


# ---------------------------------------------------------------- the big pynwb file


def test_main_reads_equal_to_hdf5(main_read):
    io, nwb, caught, hnwb = main_read
    assert_clean(io, caught)
    n = nwbcompare.assert_same_nwb(hnwb, nwb)
    assert n > 500
    # every kind of content the file was built with is there
    assert set(nwb.processing) == {"ecephys", "ophys", "behavior"}
    assert nwb.units["spike_times"][2] is not None and list(nwb.units["spike_times"][2]) == [0.05, 1.5, 2.5, 3.0]
    assert nwb.units["obs_intervals"][1].tolist() == [[0.0, 0.5], [0.7, 1.0]]
    assert list(nwb.trials["stimulus"][:]) == [f"grating-{i * 45}" for i in range(5)]
    assert nwb.intracellular_recordings is not None and len(nwb.intracellular_recordings) == 2
    assert nwb.lab_meta_data["rig_meta"].rig == "rig-7"
    assert list(nwb.lab_meta_data["rig_meta"].labels[:]) == ["left", "right", "béta"]


def test_main_references_resolve_to_the_same_objects(main_read):
    io, nwb, caught, hnwb = main_read
    # links and references resolve to the container objects of this file, not copies
    assert nwb.acquisition["follower"] in nwb.acquisition["clocked"].timestamp_link
    assert nwb.acquisition["follower"].fields["timestamps"] is nwb.acquisition["clocked"]
    assert nwb.acquisition["raw"].electrodes.table is nwb.electrodes
    assert nwb.electrodes["group"][5] is nwb.electrode_groups["shank1"]
    assert nwb.electrode_groups["shank0"].device is nwb.devices["probe"]
    ep = nwb.epochs["timeseries"][1]
    assert [r.timeseries for r in ep] == [nwb.stimulus["stimulus_trace"], nwb.acquisition["clocked"]]
    rois = nwb.processing["ophys"]["DfOverF"]["dff"].rois
    assert rois.table is nwb.processing["ophys"]["ImageSegmentation"]["cells"]
    assert list(rois.data[:]) == [1, 3]
    imgs = nwb.stimulus_template["templates"]
    assert list(imgs.order_of_images.data[:]) == [imgs.images["rgb"], imgs.images["gray"]]
    icr = nwb.intracellular_recordings
    resp = icr.category_tables["responses"]["response"][0]
    assert resp.timeseries is nwb.acquisition["ccs"]


def test_main_hdmf_convention(main_refs, nwb_dir):
    refs = main_refs
    assert refs["refindex"]["convention"] == "hdmf"
    assert not refs["refindex"].get("skipped")
    assert_hdmf_encoding(refs)
    with h5py.File(nwb_dir["main"], "r") as f:
        root_id = f.attrs["object_id"]
        elec_id = f["/general/extracellular_ephys/electrodes"].attrs["object_id"]
        shank_id = f["/general/extracellular_ephys/shank0"].attrs["object_id"]
        device_id = f["/general/devices/probe"].attrs["object_id"]
    # soft link -> zarr_link on the parent group
    links = zattrs(refs, "acquisition/follower")["zarr_link"]
    # (datasets carry no object_id in NWB, so the entry has none)
    assert links == [{"name": "timestamps", "source": ".", "path": "/acquisition/clocked/timestamps",
                      "source_object_id": root_id}]
    assert "acquisition/follower/timestamps/.zarray" not in refs["refs"]
    (dev_link,) = zattrs(refs, "general/extracellular_ephys/shank0")["zarr_link"]
    assert dev_link == {"name": "device", "source": ".", "path": "/general/devices/probe",
                        "object_id": device_id, "source_object_id": root_id}
    # object reference in an attribute
    table = zattrs(refs, "acquisition/raw/electrodes")["table"]
    assert table == {"zarr_dtype": "object", "value": {"source": ".", "path": "/general/extracellular_ephys/electrodes",
                                                       "object_id": elec_id, "source_object_id": root_id}}
    # object references in a dataset: JSON text in vlen-utf8
    key = "general/extracellular_ephys/electrodes/group"
    assert zattrs(refs, key)["zarr_dtype"] == "object"
    assert zarray(refs, key)["dtype"] == "|O" and zarray(refs, key)["filters"] == [{"id": "vlen-utf8"}]
    g = zarr.open_group(zarr.storage.FsspecStore(fsspec.filesystem("reference", fo=refs, asynchronous=True),
                                                 read_only=True, path=""), mode="r", zarr_format=2)
    first = json.loads(str(g[key][0]))
    assert first == {"source": ".", "path": "/general/extracellular_ephys/shank0", "object_id": shank_id,
                     "source_object_id": root_id}
    # compound with a reference field: structured <U field + _REFERENCE_FIELDS
    key = "intervals/epochs/timeseries"
    za, at = zarray(refs, key), zattrs(refs, key)
    assert [f[0] for f in za["dtype"]] == ["idx_start", "count", "timeseries"]
    assert za["dtype"][2][1].startswith("<U")
    assert at["_REFERENCE_FIELDS"] == ["timeseries"]
    assert at["zarr_dtype"] == [{"name": "idx_start", "dtype": "int32"}, {"name": "count", "dtype": "int32"},
                                {"name": "timeseries", "dtype": "object"}]
    assert g[key].dtype.names == ("idx_start", "count", "timeseries")
    # scalars stay 0-d with their real zarr_dtype
    assert zarray(refs, "session_description")["shape"] == []
    assert zattrs(refs, "session_description")["zarr_dtype"] == "str"
    assert zattrs(refs, "acquisition/raw/starting_time")["zarr_dtype"] == "float64"
    assert zattrs(refs, "acquisition/raw/data")["zarr_dtype"] == "int16"
    # cached specs, extension included
    specs = {k.split("/")[1] for k in refs["refs"] if k.startswith("specifications/")}
    assert {"core", "hdmf-common", nwbfiles.EXT_NS} <= specs
    ns = json.loads(str(g[f"specifications/{nwbfiles.EXT_NS}/0.1.0/namespace"][()]))
    assert ns["namespaces"][0]["name"] == nwbfiles.EXT_NS


def _chunk_ranges(d: h5py.Dataset):
    out = {}
    def cb(info):
        out[".".join(str(o // c) for o, c in zip(info.chunk_offset, d.chunks))] = (info.byte_offset, info.size)
    d.id.chunk_iter(cb)
    return out


def test_array_data_is_referenced_not_copied(main_refs, nwb_dir):
    refs = main_refs
    url = refs["templates"]["u"]
    with h5py.File(nwb_dir["main"], "r") as f:
        raw = f["/acquisition/raw/data"]
        off, size = raw.id.get_offset(), raw.id.get_storage_size()
        gz = _chunk_ranges(f["/acquisition/raw_gzip/data"])
    # contiguous 320 kB ElectricalSeries: one [url, offset, length] reference
    assert refs["refs"]["acquisition/raw/data/0.0"] == ["{{u}}", off, size]
    assert os.path.abspath(url) == os.path.abspath(nwb_dir["main"])
    # chunked + gzip: every chunk referenced at its byte range
    assert len(gz) == 8
    for key, (o, s) in gz.items():
        assert refs["refs"][f"acquisition/raw_gzip/data/{key}"] == ["{{u}}", o, s]
    assert zarray(refs, "acquisition/raw_gzip/data")["compressor"]["id"] == "zlib"
    info = refindex.info(refs)
    assert info["bytes_referenced"] > info["inline_bytes"]


def test_comparator_reports_first_difference(main_refs, nwb_dir):
    """The deep comparison is not vacuous: a changed value is reported with its path."""
    refs = json.loads(json.dumps(main_refs))
    key = "acquisition/clocked/data/.zattrs"
    at = json.loads(refs["refs"][key])
    at["unit"] = "km"
    refs["refs"][key] = json.dumps(at)
    refs["refs"].pop(".zmetadata", None)
    io, nwb, caught = consumer_read(refs)
    hio, hnwb = hdf5_read(nwb_dir["main"])
    try:
        with pytest.raises(nwbcompare.Mismatch, match=r"/clocked \(TimeSeries\)\.unit: 'm' != 'km'"):
            nwbcompare.assert_same_nwb(hnwb, nwb)
    finally:
        hio.close()


def test_open_nwb_reads_the_main_file(main_refs, main_read):
    nwb = refindex.open_nwb(main_refs, reader="zarr")
    assert nwb.refindex_io.skipped_entries == []
    nwbcompare.assert_same_nwb(main_read[3], nwb)


# ---------------------------------------------------------------- links to other files, hard links


def test_external_links_index_and_read(nwb_dir, tmp_path):
    path = nwb_dir["linking"]
    with h5py.File(nwb_dir["base"], "r") as f:
        base_root = f.attrs["object_id"]
        shared_id = f["/acquisition/shared_ts"].attrs["object_id"]
    refs = index(path)
    (link,) = zattrs(refs, "acquisition")["zarr_link"]
    assert {k: link[k] for k in ("name", "source", "path", "object_id", "source_object_id")} == {
        "name": "shared_ts", "source": "base.nwb", "path": "/acquisition/shared_ts", "object_id": shared_id,
        "source_object_id": base_root}
    (dlink,) = zattrs(refs, "acquisition/linked_data")["zarr_link"]
    assert (dlink["source"], dlink["path"]) == ("base.nwb", "/acquisition/shared_data/data")
    assert "external" not in refs["refindex"]

    hio, hnwb = hdf5_read(path)
    try:
        # 1. follow_external: the linked file's index is embedded
        followed = index(path, follow_external=True, inline_dataset_threshold=0)
        ext = followed["refindex"]["external"]["base.nwb"]
        assert os.path.abspath(ext["url"]) == os.path.abspath(nwb_dir["base"])
        assert ext["refs"]["refs"]["acquisition/shared_ts/data/0.0"][0] == "{{u}}"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            nwb = refindex.open_nwb(followed)
        assert [str(w.message) for w in caught] == []
        assert nwb.refindex_io.skipped_entries == []
        nwbcompare.assert_same_nwb(hnwb, nwb)
        assert nwb.acquisition["own_data"].fields["timestamps"] is nwb.acquisition["shared_ts"]
        np.testing.assert_array_equal(nwb.acquisition["linked_data"].data[:], np.arange(30) * 3)

        # 2. scan_to_file writes the linked index beside the main one and records its name
        out = tmp_path / "linking.refs.json"
        refindex.scan_to_file(str(path), out, follow_external=True)
        saved = json.loads(out.read_text())
        assert saved["refindex"]["external"]["base.nwb"]["index"] == "base.nwb.refs.json"
        assert (tmp_path / "base.nwb.refs.json").exists()
        nwbcompare.assert_same_nwb(hnwb, refindex.open_nwb(str(out)))

        # 3. no linked index at all: open_nwb indexes the linked HDF5 file on the fly
        nwbcompare.assert_same_nwb(hnwb, refindex.open_nwb(refs))
    finally:
        hio.close()


def test_cli_follow_external(nwb_dir, tmp_path):
    from refindex.cli import main

    out = tmp_path / "l.json"
    assert main(["scan", str(nwb_dir["linking"]), "-o", str(out), "--follow-external"]) == 0
    saved = json.loads(out.read_text())
    assert saved["refindex"]["external"]["base.nwb"]["index"] == "base.nwb.refs.json"
    assert (tmp_path / "base.nwb.refs.json").exists()


def test_hard_link_read_as_two_datasets(nwb_dir):
    """HDF5 has no first name: NWBHDF5IO reads both names as datasets, and so does hdmf-zarr here
    (each name an array, the chunk references shared, nothing copied; no link that pynwb would read
    as ``b.timestamp_link``)."""
    path = nwb_dir["hardlink"]
    refs = index(path)
    a, b = "acquisition/a/timestamps", "acquisition/b/timestamps"
    assert zarray(refs, a) == zarray(refs, b) and zattrs(refs, a) == zattrs(refs, b)
    keys = sorted(k[len(a):] for k in refs["refs"] if k.startswith(a + "/") and not k.endswith((".zarray", ".zattrs")))
    assert keys and all(refs["refs"][a + k] == refs["refs"][b + k] for k in keys)
    assert "zarr_link" not in zattrs(refs, "acquisition/b")
    io, nwb, caught = consumer_read(refs)
    assert_clean(io, caught)
    hio, hnwb = hdf5_read(path)
    try:
        nwbcompare.assert_same_nwb(hnwb, nwb)
    finally:
        hio.close()
    # the plain convention keeps both names as arrays too
    plain = index(path, convention="plain")
    assert plain["refs"]["acquisition/b/timestamps/0"] == plain["refs"]["acquisition/a/timestamps/0"]


# ---------------------------------------------------------------- region references, plain files


def test_region_references_hdmf(tmp_path):
    p = tmp_path / "regions.h5"
    with h5py.File(p, "w") as f:
        f.attrs["namespace"] = "x"
        f.attrs["neurodata_type"] = "Y"
        d = f.create_dataset("data", data=np.arange(20).reshape(4, 5))
        rr = f.create_dataset("regions", (2,), dtype=h5py.regionref_dtype)
        rr[0] = d.regionref[1:3, 0:2]
        rr[1] = d.regionref[...]
        f.attrs["one_region"] = d.regionref[0:1, 4:5]
        f.attrs["one_ref"] = d.ref
    refs = index(p)
    assert refs["refindex"]["convention"] == "hdmf"
    assert zattrs(refs, "regions")["zarr_dtype"] == "region"
    g = zarr.open_group(zarr.storage.FsspecStore(fsspec.filesystem("reference", fo=refs, asynchronous=True),
                                                 read_only=True, path=""), mode="r", zarr_format=2)
    values = [json.loads(str(v)) for v in g["regions"][...]]
    assert values[0]["path"] == "/data" and values[0]["region"] == {"slices": [[1, 3], [0, 2]]}
    assert values[1]["region"] == {"all": True}
    root = zattrs(refs, "")
    assert root["one_region"]["zarr_dtype"] == "region"
    assert root["one_region"]["value"]["region"] == {"slices": [[0, 1], [4, 5]]}
    assert root["one_ref"]["zarr_dtype"] == "object"
    assert (root["one_ref"]["value"]["source"], root["one_ref"]["value"]["path"]) == (".", "/data")
    assert "region" not in root["one_ref"]["value"]


def test_plain_files_unaffected(tmp_path):
    p = tmp_path / "plain.h5"
    with h5py.File(p, "w") as f:
        f["a"] = np.arange(10)
        f["s"] = 3.5
        f["link"] = h5py.SoftLink("/a")
        f.attrs["ref"] = f["a"].ref
    refs = index(p)
    assert refs["refindex"]["convention"] == "plain"
    for key in array_keys(refs):
        assert "zarr_dtype" not in json.loads(refs["refs"].get(key + "/.zattrs", "{}")), key
    assert "zarr_link" not in zattrs(refs, "") and ".specloc" not in zattrs(refs, "")
    assert refs["refs"]["link/0"] == refs["refs"]["a/0"]  # soft link materialised, data shared
    assert zarray(refs, "s")["shape"] == []


def test_nwb_forced_plain_has_no_hdmf_attrs(nwb_dir):
    refs = index(nwb_dir["hardlink"], convention="plain")
    assert refs["refindex"]["convention"] == "plain"
    for key in array_keys(refs):
        assert "zarr_dtype" not in json.loads(refs["refs"].get(key + "/.zattrs", "{}")), key


# ---------------------------------------------------------------- corpus


def _corpus(prefix):
    """Corpus files under ``prefix``, or one parameter that skips saying why (the corpus lives beside
    the repository on our machines and in CI, not on a user's)."""
    if not (CORPUS / "MANIFEST.tsv").exists():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"HDF5 corpus not found at {CORPUS}"))]
    with open(CORPUS / "MANIFEST.tsv") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return [r["relpath"] for r in rows if r["relpath"].startswith(prefix)]


@pytest.mark.parametrize("rel", _corpus("pynwb/"))
def test_corpus_nwb_reads_equal(rel):
    path = CORPUS / rel
    refs = index(path)
    assert refs["refindex"]["convention"] == "hdmf"
    assert not refs["refindex"].get("skipped")
    assert_hdmf_encoding(refs)
    io, nwb, caught = consumer_read(refs)
    with h5py.File(path, "r") as f:
        has_specs = "specifications" in f
    # files written before pynwb cached their specs: NWBHDF5IO falls back to the installed
    # namespaces too; NWBZarrV2IO says so in a warning
    assert_clean(io, caught, allowed=() if has_specs else ("No cached namespaces found",))
    hio, hnwb = hdf5_read(path)
    try:
        nwbcompare.assert_same_nwb(hnwb, nwb)
    finally:
        hio.close()


@pytest.mark.parametrize("rel", _corpus("hdmf/"))
def test_corpus_hdmf_reads_equal(rel):
    """hdmf's 1.0.5 back-compat file: not NWB; read with hdmf-zarr's plain ZarrV2IO.

    Its cached ``test_core`` spec no longer constructs with hdmf 6.2 (``Foo.my_data`` is
    declared an int scalar but stored as an array) under *either* backend, so the two
    backends are compared at the builder level, and both must fail construction alike.
    """
    from hdmf.backends.hdf5 import HDF5IO
    from hdmf.build import BuildManager, TypeMap
    from hdmf.spec import DatasetSpec, GroupSpec, NamespaceCatalog, SpecNamespace
    from hdmf_zarr.backend_zarrv2 import ZarrV2IO

    path = CORPUS / rel
    refs = index(path)
    assert refs["refindex"]["convention"] == "hdmf"
    assert_hdmf_encoding(refs)
    store = zarr.storage.FsspecStore(fsspec.filesystem("reference", fo=refs, asynchronous=True), read_only=True,
                                     path="")

    def manager(io_cls, src):
        cat = NamespaceCatalog(GroupSpec, DatasetSpec, SpecNamespace)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "namespace 'test_core' is missing the required key 'version'"
            loaded = io_cls.load_namespaces(cat, src) if io_cls is HDF5IO else io_cls.load_namespaces(cat, path=src)
        assert "test_core" in loaded
        return BuildManager(TypeMap(cat))

    hio = HDF5IO(str(path), "r", manager=manager(HDF5IO, str(path)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zio = ZarrV2IO(store, "r", manager=manager(ZarrV2IO, store))
        zb = zio.read_builder()
    assert zio.skipped_entries == [] and [str(w.message) for w in caught] == []
    try:
        hb = hio.read_builder()
        assert nwbcompare.assert_same_builders(hb, zb) > 10
        errors = []
        for io in (hio, zio):
            try:
                io.read()
                errors.append(None)
            except Exception as e:  # noqa: BLE001 - compare what each backend reports
                errors.append((type(e).__name__, str(e).split("due to:")[-1].split("(got")[0]))
        assert errors[0] == errors[1]
    finally:
        hio.close()


def test_a_changed_linked_file_is_not_read_through_its_old_index(nwb_dir, tmp_path):
    """The index of an externally linked file is checked against that file, as the main one is."""
    for name in ("linking", "base"):
        shutil.copy(nwb_dir[name], tmp_path / os.path.basename(nwb_dir[name]))
    path, base = tmp_path / os.path.basename(nwb_dir["linking"]), tmp_path / os.path.basename(nwb_dir["base"])
    followed = index(path, follow_external=True)
    with h5py.File(base, "a") as f:  # the linked file is rewritten
        f.create_dataset("extra", data=np.arange(1000))
    with pytest.raises(refindex.StaleIndexError, match="base.nwb: source changed since it was indexed"):
        refindex.open_nwb(followed)
    refindex.open_nwb(followed, check_source=False)  # asked to read anyway
