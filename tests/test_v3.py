"""Zarr format 3 indexes (issue #14): v3 documents, hdmf-zarr 0.14's v3 NWB convention, v3 parquet.

Everything is proven with real readers and no refindex code in the reading path: the
index goes through a JSON round trip, then fsspec's async ReferenceFileSystem, zarr's
FsspecStore and zarr 3 (``zarr_format=3``), hdmf-zarr's ``NWBZarrIO`` or xarray.  The codecs
a v3 reader registers are registered here as such a reader would: imagecodecs' zarr v3
codecs (``imagecodecs.zarr.register_codecs()``) and refindex's ``numcodecs.refindex_*``
classes (what its ``zarr.codecs`` entry points give an installed refindex;
:func:`test_codec_entry_points_need_no_reader_code` proves that route in a fresh
interpreter, and tests/stockenv.py reads v3 indexes with no refindex at all).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import csv
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import fsspec
import h5py
import hdf5plugin
import numpy as np
import nwbcompare
import pytest
import zarr
from conftest import assert_same_values, collect_garbage, dataset_names, notes

import refindex
from refindex import formats, pipeline
from refindex.codecs import register_codecs, register_stock_codecs, register_v3_codecs
from refindex.model import V3_KEYS
from refindex.options import ScanOptions
from stockenv import StockReader, stock_verify

from corpus import CORPUS, chunk_samples, read_whole, sampled  # noqa: E402

register_v3_codecs()
register_codecs()  # the v2 indexes compared with: refindex's numcodecs entry points, imagecodecs' codecs
register_stock_codecs()


# ---------------------------------------------------------------- helpers


def roundtrip(refs):
    """What a consumer of the JSON file gets."""
    return json.loads(json.dumps(refs, allow_nan=True))


def index3(path, **kw):
    return roundtrip(refindex.scan(str(path), zarr_format=3, **kw))


def both(path, **kw) -> tuple[dict, dict]:
    """The v2 and v3 indexes of ``path`` from one scan (the scanner's Tree is the same for both)."""
    opts = ScanOptions.from_keywords(**kw)
    assert not opts.portable  # (portable scans differ per format)
    scanned = pipeline.scan_source(str(path), opts)
    t2 = pipeline.prepare_tree(copy.deepcopy(scanned), opts)
    t3 = pipeline.prepare_tree(scanned, opts.but(zarr_format=3))
    return roundtrip(formats.to_refs(t2)), roundtrip(formats.v3.to_refs(t3))


def store_of(refs) -> zarr.storage.FsspecStore:
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True)
    return zarr.storage.FsspecStore(fs, read_only=True, path="")


def open3(refs) -> zarr.Group:
    return zarr.open_group(store_of(refs), mode="r", zarr_format=3)


def open2(refs) -> zarr.Group:
    return zarr.open_group(store_of(refs), mode="r", zarr_format=2)


def doc(refs, key):
    """The zarr.json document of node ``key`` ("" for the root)."""
    return json.loads(refs["refs"][(key + "/" if key else "") + "zarr.json"])


def attrs(refs, key):
    return doc(refs, key)["attributes"]


def values(a: zarr.Array) -> np.ndarray:
    v = np.asarray(a[...])
    return v.astype(object) if v.dtype.kind == "T" else v


def all_arrays(g: zarr.Group) -> dict[str, zarr.Array]:
    return {k: v for k, v in g.members(max_depth=None) if isinstance(v, zarr.Array)}


def assert_same_as_v2(a2: np.ndarray, a3: np.ndarray, name: str) -> None:
    """The v3 read equals the v2 read exactly: shape, dtype (text types normalised), bytes."""
    assert a3.shape == a2.shape, (name, a3.shape, a2.shape)
    if a2.dtype.kind in "OT" or a3.dtype.kind in "OT":
        def norm(x):
            return x if isinstance(x, bytes) else str(x)

        assert [norm(x) for x in a2.reshape(-1)] == [norm(x) for x in a3.reshape(-1)], name
        return
    assert a3.dtype == a2.dtype.newbyteorder("=") or a3.dtype == a2.dtype, (name, a3.dtype, a2.dtype)
    assert np.ascontiguousarray(a3).astype(a2.dtype).tobytes() == np.ascontiguousarray(a2).tobytes(), name


def assert_same_chunks(r2: dict, r3: dict, arrays: dict[str, zarr.Array], name: str) -> None:
    """Every chunk entry of the v3 index is the v2 one (same bytes, inline or referenced) under its v3 key.

    The v2 index may hold more: chunks of HDF5's fill value where the file wrote none (a v2
    array's fill value is what xarray masks; v3 states HDF5's and needs none), always inline."""
    by2: dict[str, dict[str, object]] = {}
    for k, v in r2["refs"].items():  # each index's keys by array once (a file of 2,000 arrays: 16 M prefix tests)
        parent, _, last = k.rpartition("/")
        if parent in arrays and not last.startswith("."):
            by2.setdefault(parent, {})[last] = v
    by3: dict[str, dict[str, object]] = {}
    for k, v in r3["refs"].items():
        for at in (m.start() for m in re.finditer(r"/c(?=/|$)", k)):
            if k[:at] in arrays:
                by3.setdefault(k[:at], {})[k[at + 1:]] = v
    for key, arr in arrays.items():
        ndim = len(arr.shape)
        c2, c3 = by2.get(key, {}), by3.get(key, {})
        in_v3 = {V3_KEYS.of_model_key(k, ndim): v for k, v in c2.items()}
        assert {k: v for k, v in in_v3.items() if k in c3} == c3, f"{name}:{key}"
        assert all(isinstance(v, str) for k, v in in_v3.items() if k not in c3), f"{name}:{key}"


_OPEN_IOS: list = []


@pytest.fixture(autouse=True)
def _close_ios():
    """Close hdmf-zarr ios on the main thread (their clean-up inside zarr's loop thread can hang)."""
    start = len(_OPEN_IOS)
    yield
    while len(_OPEN_IOS) > start:
        try:
            _OPEN_IOS.pop().close()
        except Exception:  # noqa: BLE001, S110 - an io that failed to open has nothing to close
            pass
    collect_garbage()  # (cheap: what earlier tests left alive is frozen)


def nwb_read(refs, io_class=None, store=None, **kw):
    """hdmf-zarr 0.14's NWBZarrIO over the index; returns (io, nwbfile, warnings)."""
    from hdmf_zarr.nwb import NWBZarrIO

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        io = (io_class or NWBZarrIO)(path=store if store is not None else store_of(refs), mode="r", **kw)
        _OPEN_IOS.append(io)
        nwb = io.read()
    return io, nwb, [f"{w.category.__name__}: {w.message}" for w in caught]


def hdf5_nwb(path):
    import pynwb

    io = pynwb.NWBHDF5IO(str(path), "r")
    _OPEN_IOS.append(io)
    return io.read()


# ---------------------------------------------------------------- NWB files


@pytest.fixture(scope="module")
def nwb3(nwb_files):
    pytest.importorskip("hdmf_zarr")
    return nwb_files


@pytest.fixture(scope="module")
def main3(nwb3):
    return index3(nwb3["main"])


@pytest.mark.parametrize("name", ["main", "base"])
def test_nwb_reads_equal_to_hdf5_through_stock_nwbzarrio(nwb3, main3, name):
    refs = main3 if name == "main" else index3(nwb3[name])
    assert refs["refindex"]["zarr_format"] == 3 and refs["refindex"]["convention"] == "hdmf"
    assert not refs["refindex"].get("skipped")
    _io, nwb, caught = nwb_read(refs)
    assert caught == [], caught
    n = nwbcompare.assert_same_nwb(hdf5_nwb(nwb3[name]), nwb)
    assert n > (500 if name == "main" else 20)


def test_nwb_main_content_and_references(nwb3, main3):
    _io, nwb, _ = nwb_read(main3)
    assert set(nwb.processing) == {"ecephys", "ophys", "behavior"}
    assert list(nwb.units["spike_times"][2]) == [0.05, 1.5, 2.5, 3.0]
    assert nwb.units["obs_intervals"][1].tolist() == [[0.0, 0.5], [0.7, 1.0]]
    assert list(nwb.lab_meta_data["rig_meta"].labels[:]) == ["left", "right", "béta"]
    # links and references resolve to this file's containers, not copies
    assert nwb.acquisition["follower"].fields["timestamps"] is nwb.acquisition["clocked"]
    assert nwb.acquisition["raw"].electrodes.table is nwb.electrodes
    assert nwb.electrodes["group"][5] is nwb.electrode_groups["shank1"]
    assert nwb.electrode_groups["shank0"].device is nwb.devices["probe"]
    ep = nwb.epochs["timeseries"][1]
    assert [r.timeseries for r in ep] == [nwb.stimulus["stimulus_trace"], nwb.acquisition["clocked"]]
    imgs = nwb.stimulus_template["templates"]
    assert list(imgs.order_of_images.data[:]) == [imgs.images["rgb"], imgs.images["gray"]]
    assert nwb.intracellular_recordings.category_tables["responses"]["response"][0].timeseries \
        is nwb.acquisition["ccs"]


def test_nwb_main_convention_documents(nwb3, main3):
    refs = main3
    root = doc(refs, "")
    assert root["zarr_format"] == 3 and root["node_type"] == "group"
    assert root["attributes"][".specloc"] == "specifications"
    listed = root["consolidated_metadata"]["metadata"]
    nodes = {k[: -len("/zarr.json")] for k in refs["refs"] if k.endswith("/zarr.json")}
    assert set(listed) == nodes  # every node, flat, relative paths
    assert all(json.loads(refs["refs"][k + "/zarr.json"]) == listed[k] for k in nodes)
    # links on the parent group, no object ids
    assert attrs(refs, "acquisition/follower")["_LINKS"] == [
        {"name": "timestamps", "source": ".", "path": "/acquisition/clocked/timestamps"}]
    assert "acquisition/follower/timestamps/zarr.json" not in refs["refs"]
    assert attrs(refs, "general/extracellular_ephys/shank0")["_LINKS"] == [
        {"name": "device", "source": ".", "path": "/general/devices/probe"}]
    # attribute references
    assert attrs(refs, "acquisition/raw/electrodes")["table"] == {
        "_REFERENCE": {"source": ".", "path": "/general/extracellular_ephys/electrodes"}}
    # reference datasets: absolute paths as text
    key = "general/extracellular_ephys/electrodes/group"
    d = doc(refs, key)
    assert d["data_type"] == "string" and d["attributes"]["_DTYPE"] == "object_reference"
    assert d["codecs"][0] == {"name": "vlen-utf8", "configuration": {}}
    g = open3(refs)
    assert list(values(g[key]))[:5] == ["/general/extracellular_ephys/shank0"] * 4 + [
        "/general/extracellular_ephys/shank1"]
    # compound with a reference member
    key = "intervals/epochs/timeseries"
    d = doc(refs, key)
    fields = d["data_type"]["configuration"]["fields"]
    assert [f["name"] for f in fields] == ["idx_start", "count", "timeseries"]
    assert fields[2]["data_type"] == {"name": "fixed_length_utf32", "configuration": {"length_bytes": 2048}}
    assert d["attributes"]["_REFERENCE_FIELDS"] == ["timeseries"] and "_DTYPE" not in d["attributes"]
    assert g[key][0]["timeseries"] == "/stimulus/presentation/stimulus_trace"
    # scalars are 0-d, key "c"; numbers keep their type; text is vlen-utf8
    d = doc(refs, "acquisition/raw/starting_time")
    assert d["shape"] == [] and d["data_type"] == "float64" and d["attributes"]["_DTYPE"] == "float64"
    assert "_ARRAY_DIMENSIONS" not in d["attributes"] and "dimension_names" not in d
    assert "acquisition/raw/starting_time/c" in refs["refs"]
    assert attrs(refs, "session_description")["_DTYPE"] == "str"
    assert doc(refs, "acquisition/raw/data")["attributes"]["_DTYPE"] == "int16"
    # hdmf-zarr keeps _ARRAY_DIMENSIONS as an attribute; dimension_names says the same
    raw = doc(refs, "acquisition/raw/data")
    assert raw["attributes"]["_ARRAY_DIMENSIONS"] == raw["dimension_names"] and len(raw["dimension_names"]) == 2
    assert doc(refs, "intervals/trials/correct")["attributes"]["_DTYPE"] == "bool"
    # cached specs: 0-d strings without attributes
    spec = doc(refs, "specifications/core/" + next(iter(g["specifications/core"].group_keys())) + "/nwb.base")
    assert spec["shape"] == [] and spec["data_type"] == "string" and spec["attributes"] == {}
    # the data is referenced in the HDF5 file, not copied
    with h5py.File(nwb3["main"], "r") as f:
        raw = f["/acquisition/raw/data"]
        assert refs["refs"]["acquisition/raw/data/c/0/0"] == ["{{u}}", raw.id.get_offset(), raw.id.get_storage_size()]
    gz = doc(refs, "acquisition/raw_gzip/data")
    assert gz["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}},
                            {"name": "numcodecs.zlib", "configuration": {"level": 4}}]
    assert gz["chunk_key_encoding"] == {"name": "default", "configuration": {"separator": "/"}}
    assert sum(isinstance(v, list) for k, v in refs["refs"].items() if k.startswith("acquisition/raw_gzip/data/c/")) == 8
    assert refs["refindex"]["source"]["url"] == str(nwb3["main"])
    assert refs["refindex"]["codecs"] == ["bytes", "numcodecs.zlib", "vlen-utf8"]


def test_nwb_documents_match_hdmf_zarr_export(nwb3, main3, tmp_path):
    """Our documents vs hdmf-zarr 0.14's own export of the same HDF5 file, node by node.

    Equal: the set of nodes, node types, shapes, data types, fill values and attributes
    (``_DTYPE``, ``_LINKS``, ``_REFERENCE``, ``_REFERENCE_FIELDS``, ``.specloc``, NaN
    values, object ids).  Expected differences: codecs and chunking (ours are the HDF5
    file's; the export recompresses), ``_ARRAY_DIMENSIONS`` names (hdmf-zarr takes them
    from the spec, an HDF5 file has only phony names; hdmf-zarr writes none where the spec
    has no shape), refindex's own ``refindex_*`` attributes, and ``dimension_names``.
    """
    from hdmf_zarr.nwb import NWBZarrIO
    from pynwb import NWBHDF5IO

    out = tmp_path / "main.nwb.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with NWBHDF5IO(str(nwb3["main"]), "r") as r, NWBZarrIO(str(out), mode="w") as w:
            w.export(src_io=r, write_args={"link_data": False})
    theirs = {}
    for folder, _dirs, files in os.walk(out):
        if "zarr.json" in files:
            rel = os.path.relpath(folder, out)
            d = json.loads(Path(folder, "zarr.json").read_text())
            d.pop("consolidated_metadata", None)
            theirs["" if rel == "." else rel] = d
    ours = {k[: -len("zarr.json")].rstrip("/"): json.loads(v) for k, v in main3["refs"].items()
            if k == "zarr.json" or k.endswith("/zarr.json")}
    ours[""].pop("consolidated_metadata")
    assert set(ours) == set(theirs)

    def norm_attrs(a):
        a = {k: v for k, v in a.items() if not k.startswith("refindex_") and k != "_ARRAY_DIMENSIONS"}
        return json.loads(json.dumps(a, allow_nan=True).replace("NaN", '"NaN"'))

    for key in sorted(ours):
        a, b = ours[key], theirs[key]
        assert a["node_type"] == b["node_type"], key
        assert norm_attrs(a["attributes"]) == norm_attrs(b["attributes"]), key
        if a["node_type"] == "array":
            assert (a["shape"], a["data_type"], a["fill_value"]) == (b["shape"], b["data_type"], b["fill_value"]), key
            if not a["shape"]:
                assert "_ARRAY_DIMENSIONS" not in a["attributes"] and "_ARRAY_DIMENSIONS" not in b["attributes"], key
    assert len(theirs) > 200


def test_nwb_hard_link_read_as_two_datasets(nwb3):
    """As in v2 (tests/test_nwb.py): each name of the hard-linked dataset an array of its own."""
    refs = index3(nwb3["hardlink"])
    a, b = "acquisition/a/timestamps", "acquisition/b/timestamps"
    assert doc(refs, a) == doc(refs, b) and "_LINKS" not in attrs(refs, "acquisition/b")
    chunks = [v for k, v in refs["refs"].items() if k.startswith(a + "/c")]
    assert chunks and chunks == [v for k, v in refs["refs"].items() if k.startswith(b + "/c")]
    _io, nwb, caught = nwb_read(refs)
    assert caught == []
    nwbcompare.assert_same_nwb(hdf5_nwb(nwb3["hardlink"]), nwb)


def test_open_nwb_reads_a_v3_index_with_nwbzarrio(nwb3, main3, tmp_path):
    """refindex.open_nwb picks hdmf-zarr 0.14's NWBZarrIO for a v3 index (from memory, IndexStore)."""
    from hdmf_zarr.nwb import NWBZarrIO

    index = tmp_path / "main.refs.json"
    index.write_text(json.dumps(main3, allow_nan=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nwb = refindex.open_nwb(str(index), reader="zarr")
    _OPEN_IOS.append(nwb.refindex_io)
    assert isinstance(nwb.refindex_io, NWBZarrIO)
    assert nwbcompare.assert_same_nwb(hdf5_nwb(nwb3["main"]), nwb) > 500


# ---------------------------------------------------------------- external links


def linked_io_class():
    """docs/reading-elsewhere.md's recipe for external links, run as printed there (one override of NWBZarrIO).

    hdmf-zarr 0.14 resolves another file only for local directory stores: through any
    FsspecStore it concatenates ``str(store)`` with the source and fails.  ``resolve_ref``
    is the override point: a ``source`` other than ``"."`` opens that file's own v3 index.
    """
    from hdmf_zarr.nwb import NWBZarrIO

    readme = (Path(__file__).resolve().parents[1] / "docs" / "reading-elsewhere.md").read_text()
    code = next(block for block in readme.split("```python")[1:] if "class LinkedNWBZarrIO" in block)
    namespace = {"NWBZarrIO": NWBZarrIO, "fsspec": fsspec, "zarr": zarr}
    exec(code.split("```", 1)[0], namespace)  # noqa: S102 - the documented recipe itself
    return namespace["LinkedNWBZarrIO"]


def test_nwb_external_links(nwb3, tmp_path):
    refs = index3(nwb3["linking"])
    assert attrs(refs, "acquisition")["_LINKS"] == [
        {"name": "shared_ts", "source": "base.nwb", "path": "/acquisition/shared_ts"}]
    assert attrs(refs, "acquisition/linked_data")["_LINKS"] == [
        {"name": "data", "source": "base.nwb", "path": "/acquisition/shared_data/data"}]
    assert attrs(refs, "acquisition/own_data")["_LINKS"] == [
        {"name": "timestamps", "source": "base.nwb", "path": "/acquisition/shared_ts/timestamps"}]
    # stock NWBZarrIO cannot follow the link through a store object (hdmf-zarr 0.14)
    with pytest.raises(FileNotFoundError, match="base.nwb"):
        nwb_read(refs)
    hnwb = hdf5_nwb(nwb3["linking"])
    # resolving the source through the other file's own v3 index reads exactly what pynwb reads
    _io, nwb, caught = nwb_read(refs, linked_io_class(), linked={"base.nwb": index3(nwb3["base"])})
    assert caught == []
    assert nwbcompare.assert_same_nwb(hnwb, nwb) > 20
    assert nwb.acquisition["own_data"].fields["timestamps"] is nwb.acquisition["shared_ts"]
    np.testing.assert_array_equal(nwb.acquisition["linked_data"].data[:], np.arange(30) * 3)
    # refindex.open_nwb does the same: the linked file's index beside this one, or made on the fly
    out = tmp_path / "linking.refs.json"
    summary = refindex.scan_to_file(nwb3["linking"], out, zarr_format=3, follow_external=True)
    assert summary["zarr_format"] == 3 and summary["skipped"] == []
    written = json.loads(out.read_text())
    assert written["refindex"]["external"]["base.nwb"]["index"] == "base.nwb.refs.json"
    assert "zarr.json" in json.loads((tmp_path / "base.nwb.refs.json").read_text())["refs"]
    for source in (str(out), refs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = refindex.open_nwb(source)
        _OPEN_IOS.append(got.refindex_io)
        assert nwbcompare.assert_same_nwb(hnwb, got) > 20
        assert got.acquisition["own_data"].fields["timestamps"] is got.acquisition["shared_ts"]


# ---------------------------------------------------------------- HDF5 features: a zoo of files


def _extra_zoo(folder: Path) -> dict[str, Path]:
    """What tests/golden.py's zoo lacks for v3: szip, blosc2, string padding, fills, byte orders, datetimes."""
    path = folder / "extra.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("szip", data=np.arange(4000, dtype="<i4").reshape(100, 40) % 91, chunks=(20, 40),
                         compression="szip")
        f.create_dataset("blosc2", data=(np.arange(4000).reshape(100, 40) % 91).astype(">i4"), chunks=(20, 16),
                         **hdf5plugin.Blosc2(cname="zstd"))
        f.create_dataset("bitshuffle_none", data=(np.arange(4000, dtype="<f8").reshape(100, 40) % 91),
                         chunks=(20, 16), **hdf5plugin.Bitshuffle(cname="none"))
        f.create_dataset("shuffle_gzip_be", data=((np.arange(900).reshape(30, 30) % 77) * 3).astype(">i8"),
                         chunks=(7, 11), shuffle=True, compression="gzip")
        f.create_dataset("nan_fill", shape=(30,), chunks=(10,), dtype="<f4", fillvalue=np.nan)
        f["nan_fill"][:10] = 1
        f.create_dataset("int_fill", shape=(5, 9), chunks=(2, 4), dtype=">i2", fillvalue=-7)
        f["int_fill"][0:2, 0:4] = 3
        f.create_dataset("complex_fill", shape=(6,), chunks=(3,), dtype=">c16", fillvalue=complex(np.inf, -1))
        f["complex_fill"][:3] = [1j, 2, 3]
        cdt = np.dtype([("a", ">i4"), ("b", ">f8"), ("c", "S3")])
        f.create_dataset("be_compound", shape=(20,), chunks=(5,), dtype=cdt,
                         fillvalue=np.array((7, 2.5, b"zz"), cdt))
        f["be_compound"][:5] = [(i, i / 2, b"ab") for i in range(5)]
        mdt = np.dtype([("a", ">i4"), ("b", "<f8"), ("c", ">c8"), ("d", ("<u2", (2,))), ("e", (">i2", (3,)))])
        f.create_dataset("mixed_order", shape=(20,), chunks=(6,), dtype=mdt, compression="gzip",
                         fillvalue=np.array((-1, 0.5, 1 + 2j, (3, 4), (5, 6, 7)), mdt))
        f["mixed_order"][:12] = [(i, i * 1.5, complex(i, -i), (i, i + 1), (-i, i, 2 * i)) for i in range(12)]
        tid = h5py.h5t.C_S1.copy()
        tid.set_size(6)
        tid.set_strpad(h5py.h5t.STR_SPACEPAD)
        d = h5py.h5d.create(f.id, b"spacepad", tid, h5py.h5s.create_simple((3,)))
        d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([b"ab    ", b"a b   ", b"abcdef"], "S6"), mtype=tid)
        tid = h5py.h5t.C_S1.copy()
        tid.set_size(5)
        tid.set_strpad(h5py.h5t.STR_NULLTERM)
        d = h5py.h5d.create(f.id, b"nullterm_garbage", tid, h5py.h5s.create_simple((2,)))
        d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([b"ab\0XY", b"abcde"], "S5"), mtype=tid)
        f.create_dataset("bytes_fill", shape=(8,), chunks=(4,), dtype="S4", fillvalue=b"xy")
        f["bytes_fill"][:4] = [b"a", b"b", b"c", b"d"]
        opaque_m8 = h5py.opaque_dtype(np.dtype("M8[s]"))
        f.create_dataset("datetime", data=np.array([0, 10**9, -5], dtype="M8[s]").astype(opaque_m8))
        when = f.create_dataset("datetime_unwritten", shape=(10,), chunks=(5,), dtype=opaque_m8)
        when[:5] = np.arange(5).astype("M8[s]").astype(opaque_m8)
        f.create_dataset("longdouble", data=np.arange(6, dtype=np.longdouble) / 3, chunks=(3,))
        x = f.create_dataset("dims/x", data=np.arange(5.0))
        x.make_scale("x")
        v = f.create_dataset("dims/v", data=np.zeros((5, 3)))
        v.dims[0].attach_scale(x)
        f.create_dataset("names/é ü #1, two.three", data=np.arange(3))
    return {"extra": path}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    import golden

    folder = tmp_path_factory.mktemp("zoo").resolve()
    with _cwd(folder):  # external raw storage and virtual sources are named relative to the files
        paths = {k: folder / v for k, v in golden._zoo(Path(".")).items()}
    paths.update(_extra_zoo(folder))
    return paths


REFERENCED = {"inline_threshold": 0, "inline_dataset_threshold": 0}


@contextlib.contextmanager
def _cwd(folder: Path):
    old = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(old)


def _compare_indexes(path: Path, **kw) -> tuple[dict, dict, int]:
    """v2 and v3 indexes of ``path``: same arrays, same values, same chunk bytes under v3 keys."""
    r2, r3 = both(path, **kw)
    a2, a3 = all_arrays(open2(r2)), all_arrays(open3(r3))
    assert set(a2) == set(a3), path
    for name, arr in a2.items():
        assert_same_as_v2(values(arr), values(a3[name]), f"{path.name}:{name}")
    assert_same_chunks(r2, r3, a2, path.name)
    return r2, r3, len(a2)


def _check_h5py(path: Path, g3: zarr.Group, refs: dict) -> int:
    """Every dataset of ``path`` that v3 holds as plain values equals h5py's read (``refs``: the index)."""
    checked = 0
    with h5py.File(path, "r") as f, _cwd(path.parent):  # libhdf5 finds external raw data from the cwd
        for obj_name in dataset_names(f):  # names first, zarr reads after: never zarr inside visititems
            obj = f[obj_name]
            if obj_name not in g3:
                continue
            if obj.shape is None:  # a null dataspace (h5py: Empty): an empty array, nothing read
                assert values(g3[obj_name]).shape == (0,), obj_name
                checked += 1
                continue
            if h5py.check_ref_dtype(obj.dtype) is not None or obj.dtype.names and any(
                    h5py.check_dtype(ref=obj.dtype.fields[n][0]) for n in obj.dtype.names):
                continue  # references: JSON text (plain files), compared with v2
            if h5py.check_vlen_dtype(obj.dtype) is not None and h5py.check_string_dtype(obj.dtype) is None:
                continue  # sequences: JSON text, compared with v2
            got = values(g3[obj_name])
            view = notes(refs, obj_name).get("refindex_view_dtype")
            if view is not None:  # long doubles as raw bytes: the numbers they hold
                from refindex.read.inspect._verify import view_dtype

                got = got.view(view_dtype(view))
            checked += 1
            if h5py.check_string_dtype(obj.dtype) is not None and h5py.check_string_dtype(obj.dtype).length is None:
                want = np.asarray(obj.asstr()[()], dtype=object)
                assert [str(v) for v in got.reshape(-1)] == list(want.reshape(-1)), obj_name
            elif obj.dtype.kind in "Mm":
                assert got.dtype == obj.dtype and got.tobytes() == obj[()].tobytes(), obj_name
            elif view is not None:  # (h5py reads big-endian complex256 wrongly: values_of reads it right)
                from refindex.checks.compare import leaf_equal, values_of

                assert leaf_equal(values_of(obj)[()], got), obj_name
            else:
                assert_same_values(obj[()], got)
    return checked


@pytest.mark.parametrize("inline", ["default", "referenced"])
def test_zoo_v3_equals_v2_and_h5py(zoo, inline):
    kw = REFERENCED if inline == "referenced" else {}
    arrays = checked = 0
    for path in zoo.values():
        _r2, r3, n = _compare_indexes(path, **kw)
        arrays += n
        checked += _check_h5py(path, open3(r3), r3)
    assert arrays > 80 and checked > 70


def test_zoo_codecs_and_types(zoo):
    docs, hidden = {}, {}
    for name, path in zoo.items():
        r3 = index3(path, **REFERENCED)
        for k, v in r3["refs"].items():
            if k.endswith("zarr.json"):
                docs[f"{name}:{k[:-len('/zarr.json')]}"] = json.loads(v)
                hidden[f"{name}:{k[:-len('/zarr.json')]}"] = notes(r3, k[:-len("zarr.json")])
    # refindex's notes on nodes are in the provenance, never in attributes xarray would show
    assert not [k for k, d in docs.items() for a in d["attributes"] if a.startswith("refindex_") or a == "zarr_link"]

    def chain(key):
        return [c["name"] for c in docs[key]["codecs"]]

    le = {"name": "bytes", "configuration": {"endian": "little"}}
    assert docs["filter_gzip:x"]["codecs"] == [le, {"name": "numcodecs.zlib", "configuration": {"level": 6}}]
    assert docs["filter_shuffle_fletcher32:x"]["codecs"] == [
        le, {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
        {"name": "numcodecs.zlib", "configuration": {"level": 4}},
        {"name": "numcodecs.fletcher32", "configuration": {}}]
    assert chain("filter_zstd:x") == ["bytes", "numcodecs.zstd"]
    assert chain("filter_bzip2:x") == ["bytes", "numcodecs.bz2"]
    assert chain("filter_blosc:x") == ["bytes", "numcodecs.blosc"]
    assert docs["filter_lzf:x"]["codecs"][1] == {"name": "imagecodecs_lzf", "configuration": {"header": False}}
    assert docs["filter_lz4:x"]["codecs"][1] == {"name": "imagecodecs_lz4h5", "configuration": {}}
    assert chain("filter_bitshuffle:x") == ["bytes", "numcodecs.refindex_h5bitshuffle"]
    with h5py.File(zoo["extra"]) as f:  # the filter's parameters as libhdf5 stored them
        cd = f["szip"].id.get_create_plist().get_filter(0)[2]
    assert docs["extra:szip"]["codecs"][1] == {"name": "imagecodecs_szip", "configuration": dict(zip(
        ("options_mask", "pixels_per_block", "bits_per_pixel", "pixels_per_scanline"), cd))}
    # no stock v3 codec for these two: refindex's own (v2 names imagecodecs_b2nd, imagecodecs_bitshuffle + astype)
    assert docs["extra:blosc2"]["codecs"] == [{"name": "bytes", "configuration": {"endian": "big"}},
                                              {"name": "numcodecs.refindex_b2nd", "configuration": {}}]
    assert docs["extra:bitshuffle_none"]["codecs"][1] == {"name": "numcodecs.refindex_h5bitshuffle", "configuration": {
        "itemsize": 8, "compression": 0, "blocksize": 0, "size": 20 * 16 * 8}}
    assert chain("extra:shuffle_gzip_be")[:2] == ["bytes", "numcodecs.shuffle"]
    assert docs["extra:shuffle_gzip_be"]["codecs"][0] == {"name": "bytes", "configuration": {"endian": "big"}}
    assert hidden["filter_scaleoffset:x"]["refindex_inlined"]  # no codec: values inline
    # data types and fill values
    assert docs["dtypes:contig_7"]["data_type"] == "float16"
    assert docs["dtypes:contig_12"]["data_type"] == "bool"
    assert docs["dtypes:fixed"]["data_type"] == {"name": "null_terminated_bytes", "configuration": {"length_bytes": 5}}
    assert docs["dtypes:opaque"]["data_type"] == {"name": "raw_bytes", "configuration": {"length_bytes": 8}}
    # variable-length UTF-8 text as fixed-width text (what xarray makes of it over netCDF files)
    assert docs["dtypes:vlen"]["data_type"] == {"name": "fixed_length_utf32", "configuration": {"length_bytes": 36}}
    assert docs["extra:datetime"]["data_type"] == {"name": "numpy.datetime64",
                                                   "configuration": {"unit": "s", "scale_factor": 1}}
    assert docs["extra:datetime_unwritten"]["fill_value"] == 0  # libhdf5's fill, recorded by the scanner
    assert docs["extra:longdouble"]["data_type"] == {"name": "raw_bytes", "configuration": {"length_bytes": 16}}
    assert hidden["extra:longdouble"]["refindex_view_dtype"] == "<f16"
    assert docs["extra:nan_fill"]["fill_value"] == "NaN"
    assert docs["extra:int_fill"]["fill_value"] == -7
    assert docs["extra:complex_fill"]["fill_value"] == ["Infinity", -1.0]
    assert docs["extra:bytes_fill"]["fill_value"] == base64.b64encode(b"xy").decode()
    assert docs["extra:be_compound"]["fill_value"] == {"a": 7, "b": 2.5, "c": base64.b64encode(b"zz").decode()}
    mixed = docs["extra:mixed_order"]
    assert mixed["codecs"][:2] == [le, {"name": "numcodecs.refindex_byteswap", "configuration": {
        "itemsize": 30, "fields": [[0, 4, 1], [12, 4, 2], [24, 2, 1], [26, 2, 1], [28, 2, 1]]}}]
    assert mixed["fill_value"] == {"a": -1, "b": 0.5, "c": [1.0, 2.0], "d": {"0": 3, "1": 4},
                                   "e": {"0": 5, "1": 6, "2": 7}}
    # padded compound: HDF5's layout kept with explicit pad members, as in v2
    fields = docs["dtypes:compound"]["data_type"]["configuration"]["fields"]
    assert [f["name"] for f in fields] == ["a", "refindex_pad_2", "b", "arr", "refindex_pad_28"]
    # 0-d: shape [], chunk key "c"; empty and null dataspaces (an empty array: no value to read)
    assert docs["dtypes:scalar"]["shape"] == [] and docs["dtypes:scalar"]["chunk_grid"]["configuration"] == {
        "chunk_shape": []}
    assert docs["dtypes:zero"]["shape"] == [0, 3]
    assert hidden["dtypes:null"]["refindex_null_dataspace"] is True and docs["dtypes:null"]["shape"] == [0]
    assert docs["dtypes:null"]["dimension_names"] == ["null_dataspace"]
    # dimension names from the scales (netCDF / xarray); plain files keep no _ARRAY_DIMENSIONS
    # attribute (xarray would show it as a user attribute in v3)
    assert docs["extra:dims/v"]["dimension_names"] == ["x", "phony_dim_0"]
    assert "_ARRAY_DIMENSIONS" not in docs["extra:dims/v"]["attributes"]
    assert "dimension_names" not in docs["dtypes:scalar"]
    # plain convention: links materialised or recorded, as in v2
    assert hidden["layouts:soft"]["refindex_link"] == {"type": "soft", "target": "/contiguous"}
    assert hidden["layouts:"]["zarr_link"][0]["name"] == "dangling"
    # every name v3 writes is on the safety allowlist (and refindex's own all have their v3 class)
    from refindex.codecs import V3_NAMES
    from refindex.codecs.zarr3 import CLASSES
    from refindex.checks.safety import ALLOWED_V3_CODECS

    named = {c["name"] for d in docs.values() for c in d.get("codecs", [])}
    assert named <= ALLOWED_V3_CODECS and {n for n, _ in V3_NAMES.values()} <= ALLOWED_V3_CODECS
    assert {n for n in ALLOWED_V3_CODECS if n.startswith("numcodecs.refindex_")} == set(CLASSES)


def test_long_doubles_and_unwritten_datetimes_read_as_in_v2(zoo):
    """Long doubles are raw bytes with the numpy type to view them as; datetime fills are libhdf5's."""
    g = open3(index3(zoo["extra"], **REFERENCED))
    a = g["longdouble"]
    view = notes(index3(zoo["extra"], **REFERENCED), "longdouble")["refindex_view_dtype"]
    assert a.dtype == np.dtype("V16") and np.array_equal(a[...].view(view),
                                                         np.arange(6, dtype=np.longdouble) / 3)
    with h5py.File(zoo["extra"]) as f:
        want = f["datetime_unwritten"][...].view("i8")
    assert g["datetime_unwritten"][...].astype("i8").tolist() == want.tolist() == [0, 1, 2, 3, 4, 0, 0, 0, 0, 0]


def test_portable_v3_copies_in_what_only_refindex_decodes_and_refuses_mixed_byte_orders(zoo):
    """--portable holds in v3: blosc2 and uncompressed bitshuffle (stock in v2, not in v3) are copied
    in; a compound mixing byte orders has no stock v3 form, so it fails naming it, or is skipped."""
    with pytest.raises(refindex.UnsupportedError, match="refindex_byteswap") as err:
        refindex.scan(zoo["extra"], zarr_format=3, portable=True, **REFERENCED)
    assert err.value.path == "/mixed_order"
    refs = index3(zoo["extra"], portable=True, on_unsupported="skip", **REFERENCED)
    assert [s["path"] for s in refs["refindex"]["skipped"]] == ["/mixed_order"]
    assert not [c for c in refs["refindex"]["codecs"] if "refindex" in c], refs["refindex"]["codecs"]
    for name in ("blosc2", "bitshuffle_none", "spacepad"):
        assert "refindex_inlined" in notes(refs, name), name
    assert notes(refs, "szip").get("refindex_inlined") is None  # stock codecs stay references
    assert _check_h5py(zoo["extra"], open3(refs), refs) > 15
    # v2 keeps them referenced with stock codecs: portability is judged per format
    r2 = refindex.scan(zoo["extra"], portable=True, **REFERENCED)
    assert "refindex_inlined" not in notes(r2, "blosc2") and "blosc2/.zarray" in r2["refs"]


def test_zarr_refusal_in_v3_fails_naming_the_dataset_or_is_skipped(zoo):
    """The reader's check runs on v3 documents: what zarr refuses never reaches an index."""
    opts = ScanOptions(zarr_format=3)
    tree = pipeline.scan_tree(zoo["extra"], opts)
    tree.arrays["/int_fill"].fill_value = 1.5  # a fill value no integer type has
    tree.arrays["/nan_fill"].compressor = {"id": "zlib", "bogus": 1}
    with pytest.raises(refindex.RefindexError, match="no zarr v3 form") as err:
        pipeline.check_readable(tree, opts, str(zoo["extra"]))
    assert err.value.path == "/int_fill"
    pipeline.check_readable(tree, opts.but(on_unsupported="skip"), str(zoo["extra"]))
    assert {s["path"] for s in tree.skipped} == {"/int_fill", "/nan_fill"}
    doc3 = formats.v3.array_document(tree.arrays["/szip"])
    doc3["codecs"][1]["configuration"]["bogus"] = 1  # numcodecs-style configurations are built too
    from refindex.codecs import zarr_refusal_v3

    assert "unexpected keyword" in zarr_refusal_v3(doc3)


def _hdmf_like(path: Path) -> h5py.File:
    f = h5py.File(path, "w")
    f.attrs["namespace"] = "x"
    f.attrs["neurodata_type"] = "Y"
    return f


def test_hdmf_null_reference_is_refused(tmp_path):
    path = tmp_path / "null.h5"
    with _hdmf_like(path) as f:
        t = f.create_dataset("target", data=np.arange(3))
        refs = f.create_dataset("refs", shape=(2,), dtype=h5py.ref_dtype)
        refs[0] = t.ref  # refs[1] stays a null reference
    with pytest.raises(refindex.UnsupportedError, match="null object reference") as err:
        refindex.scan(str(path), zarr_format=3)
    assert err.value.path == "/refs" and str(path) in str(err.value)
    skipped = refindex.scan(str(path), zarr_format=3, on_unsupported="skip")["refindex"]["skipped"]
    assert [s["path"] for s in skipped] == ["/refs"]
    assert refindex.scan(str(path), on_unsupported="skip")["refindex"].get("skipped") is None  # v2 has a form


def test_hdmf_region_references_keep_refindex_extension(tmp_path):
    path = tmp_path / "regions.h5"
    with _hdmf_like(path) as f:
        d = f.create_dataset("data", data=np.arange(20).reshape(4, 5))
        rr = f.create_dataset("regions", (2,), dtype=h5py.regionref_dtype)
        rr[0] = d.regionref[1:3, 0:2]
        rr[1] = d.regionref[...]
        f.attrs["one_region"] = d.regionref[0:1, 4:5]
        f.attrs["one_ref"] = d.ref
    refs = index3(path)
    assert refs["refindex"]["convention"] == "hdmf"
    assert attrs(refs, "regions")["_DTYPE"] == "region"
    got = [json.loads(str(v)) for v in values(open3(refs)["regions"])]
    assert got[0]["path"] == "/data" and got[0]["region"] == {"slices": [[1, 3], [0, 2]]}
    assert got[1]["region"] == {"all": True}
    root = attrs(refs, "")
    assert root["one_region"]["zarr_dtype"] == "region"  # hdmf-zarr refuses it loudly, never misreads it
    assert root["one_region"]["value"]["region"] == {"slices": [[0, 1], [4, 5]]}
    assert root["one_ref"] == {"_REFERENCE": {"source": ".", "path": "/data"}}
    assert refindex.verify(str(path), refs).ok


def _vlen_regref_file(path: Path) -> None:
    """A dataset carrying an attribute h5py cannot read safely (a variable-length sequence of region
    references, as h5repack_attr_refs.h5 in the corpus has) beside ordinary attributes."""
    with h5py.File(path, "w") as f:
        d = f.create_dataset("g/dset_main", data=np.arange(12, dtype="i4").reshape(3, 4))
        d.attrs["kept"] = 3
        f.attrs["root_kept"] = "x"
        tid = h5py.h5t.vlen_create(h5py.h5t.STD_REF_DSETREG)
        h5py.h5a.create(d.id, b"Vlen_REGREF", tid, h5py.h5s.create_simple((2,)))


@pytest.mark.parametrize("convention", ["plain", "hdmf"])
def test_unreadable_attribute_fails_or_is_recorded_in_v3_exactly_as_in_v2(tmp_path, convention):
    """An attribute h5py cannot read is never dropped silently from a v3 index: the default fails the
    scan with the v2 error (file, dataset, attribute, reason); ``on_unsupported="skip"`` leaves it out
    and records the same ``skipped`` entry as v2, in both trees of one scan, in the v3 JSON index and
    in the v3 parquet index."""
    path = tmp_path / "vlen_regref.h5"
    _vlen_regref_file(path)
    errors = {}
    for fmt in (2, 3):
        with pytest.raises(refindex.UnsupportedError) as err:
            refindex.scan(str(path), zarr_format=fmt, convention=convention)
        errors[fmt] = (str(err.value), err.value.path)
    with pytest.raises(refindex.UnsupportedError) as err:
        refindex.scan_to_file(str(path), tmp_path / "v3.parq", format="parquet", zarr_format=3,
                              convention=convention)
    errors["parquet3"] = (str(err.value), err.value.path)
    assert errors[2] == errors[3] == errors["parquet3"], errors
    assert errors[3][1] == "/g/dset_main"
    assert str(path) in errors[3][0] and "'Vlen_REGREF'" in errors[3][0] and "region references" in errors[3][0]
    assert not (tmp_path / "v3.parq").exists()
    # skip: one scan, two trees, the same record
    expected = [{"path": "/g/dset_main", "attribute": "Vlen_REGREF",
                 "reason": "attribute 'Vlen_REGREF' cannot be read by h5py: region references inside "
                           "variable-length data (h5py cannot read them safely)"}]
    opts = ScanOptions(on_unsupported="skip", convention=convention)
    scanned = pipeline.scan_source(str(path), opts)
    t2 = pipeline.prepare_tree(copy.deepcopy(scanned), opts)
    t3 = pipeline.prepare_tree(scanned, opts.but(zarr_format=3))
    assert t2.skipped == t3.skipped == expected
    r2, r3 = both(path, on_unsupported="skip", convention=convention)
    assert r2["refindex"]["skipped"] == r3["refindex"]["skipped"] == expected
    a3 = attrs(r3, "g/dset_main")
    assert "Vlen_REGREF" not in a3 and not any("Vlen_REGREF" in json.dumps(v) for v in r3["refs"].values()
                                                if isinstance(v, str))
    assert a3["kept"] == 3 and attrs(r3, "")["root_kept"] == "x"
    np.testing.assert_array_equal(values(open3(r3)["g/dset_main"]), np.arange(12).reshape(3, 4))
    summary = refindex.scan_to_file(str(path), tmp_path / "v3.parq", format="parquet", zarr_format=3,
                                    on_unsupported="skip", convention=convention)
    assert summary["skipped"] == expected
    assert refindex.info(tmp_path / "v3.parq")["skipped"] == expected


# ---------------------------------------------------------------- writing and reading v3 indexes


def test_streamed_json_equals_the_dict(zoo, nwb3, tmp_path):
    for name, path in list(zoo.items()) + [("main", nwb3["main"])]:
        out = tmp_path / f"{name}.json"
        summary = refindex.scan_to_file(str(path), out, zarr_format=3, contiguous_chunk_bytes=4096)
        streamed = json.loads(out.read_text())
        built = index3(path, contiguous_chunk_bytes=4096)
        assert streamed == built, name
        assert summary["keys"] == len(built["refs"]) and summary["zarr_format"] == 3
        assert summary["chunks_referenced"] == sum(isinstance(v, list) for v in built["refs"].values())
        assert summary["arrays"] == sum(doc(built, k[:-10])["node_type"] == "array" for k in built["refs"]
                                        if k.endswith("/zarr.json"))
    # small blocks: many formatted blocks in flight, chunks spread over files (virtual datasets)
    for name in ("layouts", "vds", "external"):
        tree = pipeline.scan_tree(str(zoo[name]), ScanOptions(zarr_format=3, **REFERENCED))
        out = tmp_path / f"{name}.blocks.json"
        formats.v3.write_json(tree, out, block=16)
        assert json.loads(out.read_text()) == roundtrip(formats.v3.to_refs(tree)), name


def test_hierarchy_gives_documents_chunk_tables_and_inline_chunks(zoo):
    """What a store writer (JSON, parquet, a repository) starts from: the same content as the index."""
    tree = pipeline.scan_tree(str(zoo["layouts"]), ScanOptions(zarr_format=3, inline_threshold=64,
                                                               inline_dataset_threshold=0))
    h = formats.v3.hierarchy(tree)
    refs = roundtrip(formats.v3.to_refs(tree))
    assert {k: d for k, d in h.documents.items() if k} == doc(refs, "")["consolidated_metadata"]["metadata"]
    for path, chunks in h.arrays.items():
        entries = {k[len(path) + 1:]: v for k, v in refs["refs"].items() if k.startswith(path + "/c")}
        referenced = {k for k, v in entries.items() if isinstance(v, list)}
        if chunks.refs is not None:
            assert set(V3_KEYS.keys(chunks.refs.coords)) == referenced, path
        assert {k: "base64:" + base64.b64encode(b).decode() for k, b in chunks.inline.items()} == {
            k: v for k, v in entries.items() if k not in referenced}, path
    assert any(c.inline for c in h.arrays.values()) and any(c.refs is not None for c in h.arrays.values())


def test_refindex_reads_v3_indexes(zoo, tmp_path):
    """open (from memory), verify, info and schema take v3 indexes, JSON and parquet."""
    path = zoo["dtypes"]
    index = tmp_path / "dtypes.json"
    refindex.scan_to_file(path, index, zarr_format=3, **REFERENCED)
    parq = tmp_path / "dtypes.parq"
    refindex.scan_to_file(path, parq, format="parquet", zarr_format=3, **REFERENCED)
    for source in (str(index), str(parq)):
        root = refindex.open(source)
        assert root.metadata.zarr_format == 3 and len(all_arrays(root)) == 41
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = refindex.verify(str(path), source)
        assert report.ok and report.count("exact") == 41, report.summary()
        info = refindex.info(source)
        assert info["zarr_format"] == 3 and info["arrays"] == 41 and info["groups"] == 2
        assert info["codecs"]["numcodecs.zlib"] == "numcodecs" and info["codecs"]["bytes"] == "zarr"
        assert info["needs_refindex"] == ["numcodecs.refindex_byteswap"]
        model = refindex.object_model(source)
        assert model["zarr_format"] == 3 and model["members"]["contig_0"]["data_type"] == "int8"
        assert "consolidated_metadata" not in model
        assert refindex.check(model, source).ok
        assert not refindex.check({"members": {"contig_0": {"data_type": "int16"}}}, source).ok
    assert info["format"] == "parquet"
    assert refindex.info(str(index))["chunks_referenced"] == info["chunks_referenced"] > 100
    # the store serves every key from memory: opening reads the root zarr.json once
    store = refindex.read.store(str(index))
    from refindex.read import open_group

    open_group(store)
    assert store.stats.requests == 0


def test_url_policy_holds_for_v3_indexes(zoo, tmp_path):
    """An index from elsewhere may not make its reader fetch a local file: v3 indexes alike."""
    refs = index3(zoo["filter_gzip"], **REFERENCED)
    from_elsewhere = refindex.read.ReadOptions(index_url="https://example.org/x.json", check_source=False)
    with pytest.raises(refindex.UntrustedReference, match="filter_gzip.h5"):
        refindex.read.store_of(refs, from_elsewhere)
    allowed = refindex.read.ReadOptions.of(allowed_urls=[str(zoo["filter_gzip"])], check_source=False)
    assert refindex.read.open_group(refindex.read.store_of(refs, allowed))["x"].shape == (100, 37)


def test_codec_entry_points_need_no_reader_code(zoo, tmp_path):
    """With refindex's ``zarr.codecs`` entry points installed (pyproject), plain zarr reads refindex's v3
    codecs in a fresh interpreter without importing or calling anything of refindex's."""
    from refindex.codecs.zarr3 import CLASSES

    index = tmp_path / "bitshuffle.json"
    index.write_text(json.dumps(index3(zoo["filter_bitshuffle"], **REFERENCED)))
    site = tmp_path / "site"
    dist = site / "refindex_v3_codecs-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: refindex-v3-codecs\nVersion: 0.0\n")
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    section = pyproject.split('[project.entry-points."zarr.codecs"]', 1)[1].split("\n\n", 1)[0]
    (dist / "entry_points.txt").write_text("[zarr.codecs]\n" + section.replace('"', "").strip() + "\n")
    assert {line.split(" = ")[0] for line in section.strip().splitlines()} == {f'"{n}"' for n in CLASSES}
    script = textwrap.dedent(f"""
        import importlib.metadata as md
        real = md.entry_points  # the refindex installed in this venv declares them too: not this reader's
        md.entry_points = lambda **p: md.EntryPoints([e for e in real(**p) if getattr(e.dist, "name", "") != "refindex"])
        import fsspec, sys, zarr
        fs = fsspec.filesystem("reference", fo={str(index)!r}, asynchronous=True)
        g = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)
        print(int(g["x"][...].sum()), "refindex" in sys.modules)
        """)
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), root]))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    with h5py.File(zoo["filter_bitshuffle"], "r") as f:
        want = int(f["x"][...].sum())
    assert out.stdout.split() == [str(want), "True"]  # loaded by zarr through the entry point, nothing called
    # without the entry points the index does not open at all (zarr parses every array on open)
    env["PYTHONPATH"] = root
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode != 0 and "numcodecs.refindex_h5bitshuffle" in out.stderr


def test_cli_and_batch_make_v3_indexes(zoo, tmp_path, capsys):
    from refindex.cli import main

    out, parq = tmp_path / "gzip.json", tmp_path / "gzip.parq"
    assert main(["scan", str(zoo["filter_gzip"]), "-o", str(out), "--zarr-format", "3", "--no-progress"]) == 0
    assert main(["scan", str(zoo["filter_gzip"]), "-o", str(parq), "--zarr-format", "3", "--format", "parquet",
                 "--inline-dataset-threshold", "0", "--no-progress"]) == 0
    refs = json.loads(out.read_text())
    assert refs["refindex"]["zarr_format"] == 3 and doc(refs, "x")["codecs"][1]["name"] == "numcodecs.zlib"
    assert values(parquet_group(parq)["x"]).tolist() == values(open3(refs)["x"]).tolist()
    # a worker process (--isolate) makes the same index
    iso = tmp_path / "iso.json"
    assert main(["scan", str(zoo["filter_gzip"]), "-o", str(iso), "--zarr-format", "3", "--isolate"]) == 0
    assert json.loads(iso.read_text())["refs"] == refs["refs"]
    # batch: v3 indexes beside each input; a re-run finds them up to date, v2 options rescan
    inputs = [str(zoo["filter_lz4"]), str(zoo["dtypes"])]
    report = refindex.run_batch(inputs, output=str(tmp_path / "b"), workers=0, progress=False, zarr_format=3)
    assert not report.failed and len(report.results) == 2
    for r in report.results:
        assert "zarr.json" in json.loads(Path(r.index).read_text())["refs"], r.index
    again = refindex.run_batch(inputs, output=str(tmp_path / "b"), workers=0, progress=False, zarr_format=3)
    assert {r.status for r in again.results} == {"up_to_date"}
    v2 = refindex.run_batch(inputs, output=str(tmp_path / "b"), workers=0, progress=False)
    assert {r.status for r in v2.results} == {"indexed"}
    assert main(["batch", *inputs, "-o", str(tmp_path / "c"), "--zarr-format", "3", "--workers", "0",
                 "--no-progress"]) == 0
    assert all("zarr.json" in json.loads(p.read_text())["refs"] for p in (tmp_path / "c").rglob("*.refs.json"))
    with pytest.raises(refindex.RefindexError, match="zarr v2"):
        refindex.run_batch(inputs, output=str(tmp_path / "d"), workers=0, progress=False, zarr_format=3,
                           combine=str(tmp_path / "all.json"))


# ---------------------------------------------------------------- v3 parquet


def parquet_group(folder: Path) -> zarr.Group:
    """A v3 parquet index the plain way: fsspec's ReferenceFileSystem over the folder, zarr_format=3."""
    fs = fsspec.filesystem("reference", fo=str(folder), remote_protocol="file", asynchronous=True)
    return zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)


@pytest.mark.parametrize("record_size", [100_000, 7])
def test_parquet_v3_reads_exact_through_plain_fsspec(zoo, tmp_path, record_size):
    """fsspec's LazyReferenceMapper reads the v3 parquet layout: every array equals the JSON v3 index
    (0-d arrays, sparse and several-file chunk tables, records cut small included)."""
    for name in ("dtypes", "layouts", "vds", "external", "extra", "filter_lzf"):
        folder = tmp_path / f"{name}.{record_size}.parq"
        with _cwd(zoo[name].parent):
            summary = refindex.scan_to_file(zoo[name], folder, format="parquet", zarr_format=3,
                                            record_size=record_size, **REFERENCED)
            r3 = index3(zoo[name], **REFERENCED)
        assert summary["zarr_format"] == 3 and summary["chunks_referenced"] > 0
        meta = json.loads((folder / ".zmetadata").read_text())
        assert meta["refindex"]["zarr_format"] == 3 and "zarr_consolidated_format" not in meta
        arrays = {k: d for k, d in meta["metadata"].items() if k.endswith("/zarr.json") and d["node_type"] == "array"}
        assert all(d["chunk_key_encoding"] == {"name": "v2", "configuration": {"separator": "."}}
                   for d in arrays.values())
        pq, js = all_arrays(parquet_group(folder)), all_arrays(open3(r3))
        assert set(pq) == set(js) and len(pq) == len(arrays)
        for key in pq:
            assert_same_as_v2(values(js[key]), values(pq[key]), f"{name}:{key}")


def test_parquet_v3_nwb_through_stock_nwbzarrio(nwb3, tmp_path):
    # fsspec reads the records with fastparquet, whose import warns about a pandas 3 option
    # (Pandas4Warning, future.infer_string): imported here, before warnings are recorded
    pytest.importorskip("fastparquet")
    folder = tmp_path / "main.parq"
    refindex.scan_to_file(nwb3["main"], folder, format="parquet", zarr_format=3)
    fs = fsspec.filesystem("reference", fo=str(folder), remote_protocol="file", asynchronous=True)
    _io, nwb, caught = nwb_read(None, store=zarr.storage.FsspecStore(fs, read_only=True, path=""))
    assert [w for w in caught if "fastparquet" not in w] == []  # (fsspec reads the records with fastparquet)
    assert nwbcompare.assert_same_nwb(hdf5_nwb(nwb3["main"]), nwb) > 500


# ---------------------------------------------------------------- readers without refindex (stock)


@pytest.fixture(scope="module")
def stock() -> StockReader:
    with StockReader() as reader:
        yield reader


@pytest.fixture(scope="module")
def filters_file(tmp_path_factory) -> Path:
    """tests/test_portable.py's filters, each written by h5py/hdf5plugin, plus szip and blosc2."""
    from test_portable import FILTERS, filter_data

    h5 = tmp_path_factory.mktemp("filters3") / "filters.h5"
    data = filter_data()
    with h5py.File(h5, "w") as f:
        for name, (kw, chunks, _, _) in FILTERS.items():
            f.create_dataset(name, data=data, chunks=chunks, **kw)
        f.create_dataset("lzf_beyond_8x", data=np.zeros((100, 37), "<i4"), chunks=(16, 10), compression="lzf")
        f.create_dataset("szip", data=data, chunks=(16, 10), compression="szip")
        f.create_dataset("blosc2_be", data=data.astype(">i4"), chunks=(16, 10), **hdf5plugin.Blosc2())
    return h5


# v3 codec names and whether a stock v3 reader (imagecodecs.zarr registered) decodes them
STOCK_V3 = {"gzip": "numcodecs.zlib", "shuffle_gzip_fletcher32": "numcodecs.fletcher32", "lzf": "imagecodecs_lzf",
            "lz4": "imagecodecs_lz4h5", "lz4_small_blocks": "imagecodecs_lz4h5", "zstd": "numcodecs.zstd",
            "bzip2": "numcodecs.bz2", "blosc_lz4": "numcodecs.blosc", "blosc_zstd_bitshuffle": "numcodecs.blosc",
            "szip": "imagecodecs_szip"}
OWN_V3 = {"bitshuffle_none": "numcodecs.refindex_h5bitshuffle", "bitshuffle_lz4": "numcodecs.refindex_h5bitshuffle",
          "bitshuffle_zstd": "numcodecs.refindex_h5bitshuffle", "blosc2_2d": "numcodecs.refindex_b2nd",
          "blosc2_be": "numcodecs.refindex_b2nd", "lzf_beyond_8x": "numcodecs.refindex_h5lzf"}


def test_each_filter_in_v3_reads_exact_in_a_stock_reader(filters_file, stock, tmp_path):
    """Per codec, what a reader with zarr, numcodecs and imagecodecs alone decodes from a v3 index
    (chunks written by h5py/hdf5plugin, some with optional filters skipped: those are inline)."""
    index = tmp_path / "filters3.json"
    refindex.scan_to_file(filters_file, index, zarr_format=3, **REFERENCED)
    refs = json.loads(index.read_text())
    results = stock_verify(stock, filters_file, index)
    for name, codec in {**STOCK_V3, **OWN_V3}.items():
        assert codec in [c["name"] for c in doc(refs, name)["codecs"]], (name, doc(refs, name)["codecs"])
        assert any(isinstance(v, list) for k, v in refs["refs"].items() if k.startswith(f"{name}/c/")), name
        if name in OWN_V3:
            assert "UnknownCodecError" in results[name] and codec in results[name], (name, results[name])
        else:
            assert results[name] == "exact", (name, results[name])
    # with refindex's v3 codecs registered (as its entry points do) the rest reads exact too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert refindex.verify(str(filters_file), refs).ok


def test_portable_v3_index_opens_with_no_refindex(filters_file, stock, tmp_path):
    index = tmp_path / "filters3p.json"
    refindex.scan_to_file(filters_file, index, zarr_format=3, portable=True, **REFERENCED)
    refs = json.loads(index.read_text())
    assert not [c for c in refs["refindex"]["codecs"] if "refindex" in c], refs["refindex"]["codecs"]
    assert refs["refindex"]["options"]["portable"] is True and refs["refindex"]["options"]["zarr_format"] == 3
    assert stock.ask("open", str(index), True)["arrays"]  # consolidated metadata: every array parses
    results = stock_verify(stock, filters_file, index)
    assert set(results.values()) == {"exact"}, results
    for name in OWN_V3:
        assert "refindex_inlined" in notes(refs, name), name
    assert doc(refs, "lz4")["codecs"][1]["name"] == "imagecodecs_lz4h5"  # stock codecs stay references


# ---------------------------------------------------------------- the corpus (../shared/corpus)


def _corpus_rows() -> list[dict[str, str]]:
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.exists():
        return []
    with open(manifest, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


ROWS = _corpus_rows()
NO_CORPUS = pytest.mark.skipif(not ROWS, reason=f"HDF5 corpus not found at {CORPUS}")
COUNTS: dict[str, int] = {"files": 0, "arrays": 0, "not_hdf5": 0, "slices": 0, "stock_files": 0, "sampled": 0}
def _read_both(a2: zarr.Array, a3: zarr.Array) -> list[tuple[np.ndarray, np.ndarray]]:
    """Both reads of the whole array, or of its first, middle and last chunks (their chunk entries are
    compared byte for byte with the v2 ones anyway: a sample checks the translation of the metadata)."""
    if read_whole(a2.shape, a2.chunks, a2.dtype.itemsize):
        return [(values(a2), values(a3))]
    return [(np.asarray(a2[sel]), np.asarray(a3[sel])) for sel in chunk_samples(a2.shape, a2.chunks)]


def _translations(a3: dict[str, zarr.Array]) -> list[str]:
    """The arrays whose values are read through both indexes: every one, but in a file of thousands
    (netCDF-C's 2,000 variables) each distinct v3 metadata (all but attributes and shape) once, and an
    even sample.  Every chunk entry of every array is compared with v2's (:func:`assert_same_chunks`),
    so what a read adds is the metadata's translation, which arrays of the same metadata share."""
    kinds: dict[str, str] = {}
    for name in sorted(a3):
        meta = a3[name].metadata.to_dict()
        kinds.setdefault(json.dumps({k: v for k, v in meta.items() if k not in ("attributes", "shape")},
                                    sort_keys=True, default=str), name)
    return sorted(set(kinds.values()) | set(sampled(list(a3))))


@NO_CORPUS
@pytest.mark.parametrize("row", ROWS, ids=[r["relpath"] for r in ROWS])
def test_corpus_v3_reads_like_v2(row, stock, tmp_path):
    """Plain zarr with zarr_format=3 over the v3 index gives exactly the v2 index's values, array by
    array (test_corpus.py proves those equal to h5py; a file of thousands: :func:`_translations`); the
    v3 index of every file naming a codec zarr itself does not wrap (imagecodecs', refindex's) is also
    read by a stock reader, which decodes all of it but what only refindex's codecs read."""
    path = CORPUS / row["relpath"]
    if row["notes"].startswith("NOT HDF5"):
        with pytest.raises(refindex.NotHDF5Error):
            refindex.scan(str(path), zarr_format=3)
        COUNTS["not_hdf5"] += 1
        return
    r2, r3 = both(path, on_unsupported="skip")
    # nothing v2 represents is lost in v3
    assert r3["refindex"].get("skipped", []) == r2["refindex"].get("skipped", [])
    a2, a3 = all_arrays(open2(r2)), all_arrays(open3(r3))
    assert set(a2) == set(a3)
    read = _translations(a3)
    for name in read:
        pairs = _read_both(a2[name], a3[name])
        for x2, x3 in pairs:
            assert_same_as_v2(x2, x3, f"{row['relpath']}:{name}")
        COUNTS["slices"] += len(pairs) > 1
    assert_same_chunks(r2, r3, a2, row["relpath"])
    COUNTS["files"] += 1
    COUNTS["arrays"] += len(a2)
    COUNTS["sampled"] += len(a2) - len(read)
    own = [c for c in r3["refindex"]["codecs"] if "refindex" in c]
    assert bool(own) == (row["relpath"] in V3_NEEDS_REFINDEX), own
    if [c for c in r3["refindex"]["codecs"] if c.startswith("imagecodecs_")] or own:
        index = tmp_path / "index3.json"
        index.write_text(json.dumps(r3, allow_nan=True))
        bad = {p: s for p, s in stock_verify(stock, path, index).items()
               if s.split(":")[0] in ("different", "unreadable", "missing")}
        assert all(any(c in s for c in own) for s in bad.values()), bad  # only refindex's own codecs fail
        assert bool(bad) == bool(own), (bad, own)
        COUNTS["stock_files"] += 1


# Files whose v3 index names refindex's own codecs: bitshuffle with LZ4 (as in v2), and blosc2 (stock in v2).
V3_NEEDS_REFINDEX = ("kerchunk/hdf5_compression_bitshuffle.h5", "jhdf/bitshuffle_datasets.hdf5",
                     "hdf5_plugins/h5ex_d_blosc2.h5")


@NO_CORPUS
@pytest.mark.parametrize("rel", V3_NEEDS_REFINDEX)
def test_corpus_portable_v3_index_opens_with_no_refindex(rel, stock, tmp_path):
    path = CORPUS / rel
    index = tmp_path / "portable3.json"
    refindex.scan_to_file(path, index, zarr_format=3, portable=True)
    refs = json.loads(index.read_text())
    assert not [c for c in refs["refindex"]["codecs"] if "refindex" in c], refs["refindex"]["codecs"]
    assert stock.ask("open", str(index), True)["arrays"]
    results = stock_verify(stock, path, index)
    assert {s.split(":")[0] for s in results.values()} == {"exact"}, results


# xarray over the v3 indexes of the corpus's netCDF files (and through the VirtualiZarr parser and
# Icechunk): tests/test_xarray.py, with default decoding, against h5netcdf.


@NO_CORPUS
def test_corpus_counts():
    """Runs after the per-file tests of this module (pytest keeps file order): the totals."""
    if not COUNTS["files"]:
        pytest.skip("the per-file corpus tests did not run in this session")
    print(f"\ncorpus v3 == v2: {COUNTS['files']} HDF5 files, {COUNTS['arrays']} arrays' chunk entries, "
          f"{COUNTS['arrays'] - COUNTS['sampled']} arrays' values exact "
          f"({COUNTS['slices']} huge or many-chunked ones on their first and last chunks), "
          f"{COUNTS['not_hdf5']} not HDF5 (refused); "
          f"{COUNTS['stock_files']} files naming imagecodecs' or refindex's codecs read by a stock v3 reader")
    assert COUNTS["files"] + COUNTS["not_hdf5"] == len(ROWS)


def test_netcdf_file_in_xarray_from_v3(tmp_path):
    """A netCDF-4 file written by netCDF-C: dimensions and masked values as xarray sees them through netCDF4."""
    xr = pytest.importorskip("xarray")
    netCDF4 = pytest.importorskip("netCDF4")
    path = tmp_path / "t.nc"
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 4)
        t = ds.createVariable("time", "f8", ("time",))
        t[:] = np.arange(6.0)
        v = ds.createVariable("temp", "f4", ("time", "x"), fill_value=-999.0, zlib=True, chunksizes=(2, 4))
        v[:] = np.arange(24, dtype="f4").reshape(6, 4)
        v[2, 1] = np.ma.masked
        n = ds.createVariable("count", "i2", ("x",), fill_value=-1)
        n[:3] = [1, 2, 3]
        c = ds.createVariable("flag", "S1", ("x",), fill_value=b"X")
        c[:2] = [b"a", b"b"]
    refs = index3(path)
    assert "_ARRAY_DIMENSIONS" not in attrs(refs, "temp") and doc(refs, "temp")["dimension_names"] == ["time", "x"]
    # xarray cannot decode a bytes fill in v3 (and fails the whole file on one): kept in the provenance
    assert notes(refs, "flag")["refindex__FillValue"] == "X" and "refindex__FillValue" not in attrs(refs, "flag")
    for mask in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = xr.open_dataset(path, engine="netcdf4", mask_and_scale=mask)
            got = xr.open_dataset(store_of(refs), engine="zarr", consolidated=None, zarr_format=3, mask_and_scale=mask)
        for name in ("time", "temp", "count"):
            assert got[name].dims == want[name].dims, name
            np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
        if not mask:  # masked, netCDF gives NaN for bytes equal to the fill; xarray cannot mask bytes in v3
            assert [bytes(x) for x in got["flag"].values] == [bytes(x) for x in want["flag"].values]
    assert got["temp"].encoding["_FillValue"] == -999.0 and np.isnan(got["temp"].values[2, 1])


NWB_ROWS = [r["relpath"] for r in ROWS if r["relpath"].startswith("pynwb/")]


@NO_CORPUS
@pytest.mark.parametrize("rel", NWB_ROWS)
def test_corpus_nwb_reads_equal_with_nwbzarrio(rel):
    """pynwb's back-compat files: hdmf-zarr 0.14's NWBZarrIO over the v3 index equals NWBHDF5IO."""
    pytest.importorskip("hdmf_zarr")
    path = CORPUS / rel
    refs = index3(path)
    assert refs["refindex"]["convention"] == "hdmf" and not refs["refindex"].get("skipped")
    _io, nwb, caught = nwb_read(refs)
    with h5py.File(path, "r") as f:
        has_specs = "specifications" in f
    # files written before pynwb cached their specs: both readers fall back to the installed namespaces
    assert [w for w in caught if has_specs or "No cached namespaces found" not in w] == []
    nwbcompare.assert_same_nwb(hdf5_nwb(path), nwb)


@NO_CORPUS
@pytest.mark.parametrize("rel", [r["relpath"] for r in ROWS if r["relpath"].startswith("hdmf/")])
def test_corpus_hdmf_builders_equal_with_zarrio(rel):
    """hdmf's 1.0.5 back-compat file (not NWB): hdmf-zarr's v3 ZarrIO builds the same builders as HDF5IO.

    As in test_nwb.py, its cached spec no longer constructs containers under hdmf 6.2 with
    either backend, so the comparison is at the builder level, and both must fail alike.
    """
    pytest.importorskip("hdmf_zarr")
    from hdmf.backends.hdf5 import HDF5IO
    from hdmf.build import BuildManager, TypeMap
    from hdmf.spec import DatasetSpec, GroupSpec, NamespaceCatalog, SpecNamespace
    from hdmf_zarr.backend import ZarrIO

    path = CORPUS / rel
    refs = index3(path)
    assert refs["refindex"]["convention"] == "hdmf"
    store = store_of(refs)

    def manager(io_cls, src):
        cat = NamespaceCatalog(GroupSpec, DatasetSpec, SpecNamespace)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = io_cls.load_namespaces(cat, src) if io_cls is HDF5IO else io_cls.load_namespaces(cat, path=src)
        assert "test_core" in loaded
        return BuildManager(TypeMap(cat))

    hio = HDF5IO(str(path), "r", manager=manager(HDF5IO, str(path)))
    _OPEN_IOS.append(hio)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zio = ZarrIO(store, "r", manager=manager(ZarrIO, store))
        _OPEN_IOS.append(zio)
        zb = zio.read_builder()
    assert [str(w.message) for w in caught] == []
    assert nwbcompare.assert_same_builders(hio.read_builder(), zb) > 10
    errors = []
    for io in (hio, zio):
        try:
            io.read()
            errors.append(None)
        except Exception as e:  # noqa: BLE001 - compare what each backend reports
            errors.append((type(e).__name__, str(e).split("due to:")[-1].split("(got")[0]))
    assert errors[0] == errors[1]
