"""Feature tests of the core scanner: one HDF5 feature per test.

Each test writes a small HDF5 file with h5py, scans it with refindex, opens the index
with plain fsspec + zarr (the consumer path in conftest.py, not refindex's reader) and
compares the values with what h5py reads.
"""

from __future__ import annotations

import base64
import json
import math
import os
import subprocess
import sys
import textwrap

import h5py
import hdf5plugin
import numcodecs
import numpy as np
import pytest

import refindex
from refindex import formats

from conftest import (
    assert_chunk_referenced,
    assert_chunks_referenced,
    assert_same_values,
    consumer_open,
    consumer_store,
    notes,
    scan,
    scan_open,
    zattrs,
    zvalues,
)

RNG = np.random.default_rng(1234)


def h5values(path, name):
    with h5py.File(path, "r") as f:
        return f[name][()]


# ------------------------------------------------------------------ datatypes


NUMERIC = ["|i1", "<i2", ">i4", "<i8", "|u1", ">u2", "<u4", ">u8", "<f2", "<f4", ">f8", "<c8", ">c16", "|b1"]


def test_numeric_dtypes(h5path):
    with h5py.File(h5path, "w") as f:
        for i, dt in enumerate(NUMERIC):
            dt = np.dtype(dt)
            if dt.kind == "b":
                data = RNG.integers(0, 2, size=(40, 7)).astype(bool)
            elif dt.kind in "iu":
                info = np.iinfo(dt)
                data = RNG.integers(info.min, info.max, size=(40, 7), dtype=dt.newbyteorder("="), endpoint=True)
                data.flat[0], data.flat[1] = info.min, info.max
            else:
                data = RNG.normal(size=(40, 7)).astype(dt)
                if dt.kind == "c":
                    data = data + 1j * RNG.normal(size=(40, 7)).astype(dt)
                data.flat[0] = np.nan
                data.flat[1] = np.inf
                data.flat[2] = -0.0
            data = data.astype(dt)
            f.create_dataset(f"contig_{i}", data=data)
            f.create_dataset(f"chunked_{i}", data=data, chunks=(16, 4), compression="gzip")
    refs, root = scan_open(h5path)
    with h5py.File(h5path, "r") as f:
        for i, dt in enumerate(NUMERIC):
            for kind in ("contig", "chunked"):
                d = f[f"{kind}_{i}"]
                z = root[f"{kind}_{i}"]
                assert z.shape == d.shape
                assert_same_values(d[()], zvalues(z))


def test_enum(h5path):
    mapping = {"RED": 0, "GREEN": 1, "BLUE": 42}
    dt = h5py.enum_dtype(mapping, basetype="i1")
    data = np.array([0, 1, 42, 42, 0], dtype="i1")
    with h5py.File(h5path, "w") as f:
        f.create_dataset("colour", data=data, dtype=dt)
    refs, root = scan_open(h5path)
    z = root["colour"]
    assert notes(refs, "colour")["refindex_enum"] == mapping and "refindex_enum" not in zattrs(z)
    assert_same_values(data, zvalues(z))


def test_fixed_strings(h5path):
    data = np.array([b"alpha", b"be", b"", b"gamma"], dtype="S5")
    with h5py.File(h5path, "w") as f:
        f.create_dataset("s", data=data)
        f.create_dataset("s2d", data=np.array([[b"ab", b"c"], [b"", b"xy"]], dtype="S2"), chunks=(1, 2))
    refs, root = scan_open(h5path)
    assert zvalues(root["s"]).dtype == np.dtype("S5")
    assert_same_values(h5values(h5path, "s"), zvalues(root["s"]))
    assert_same_values(h5values(h5path, "s2d"), zvalues(root["s2d"]))


def test_vlen_strings(h5path):
    texts = ["", "hello", "Δt = 5 µs", "a much longer string " * 10]
    with h5py.File(h5path, "w") as f:
        f.create_dataset("utf8", data=texts, dtype=h5py.string_dtype("utf-8"))
        f.create_dataset("ascii", data=[t.encode() for t in ["x", "yy", ""]], dtype=h5py.string_dtype("ascii"))
        f.create_dataset("two_d", data=np.array([["a", "bc"], ["", "d"]], dtype=object),
                         dtype=h5py.string_dtype(), chunks=(1, 2))
        f.create_dataset("scalar", data="just one", dtype=h5py.string_dtype())
    refs, root = scan_open(h5path)
    assert list(zvalues(root["utf8"])) == texts
    assert list(zvalues(root["ascii"])) == ["x", "yy", ""]
    assert zvalues(root["two_d"]).tolist() == [["a", "bc"], ["", "d"]]
    assert root["scalar"].shape == ()
    assert str(zvalues(root["scalar"])[()]) == "just one"


def test_vlen_sequences(h5path):
    seqs = [np.array([1, 2, 3], "i4"), np.array([], "i4"), np.array([-7], "i4")]
    fseqs = [np.array([0.5, np.nan], "f8"), np.array([np.inf], "f8")]
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("ints", shape=(3,), dtype=h5py.vlen_dtype("i4"))
        for i, s in enumerate(seqs):
            d[i] = s
        d = f.create_dataset("floats", shape=(2,), dtype=h5py.vlen_dtype("f8"))
        for i, s in enumerate(fseqs):
            d[i] = s
    refs, root = scan_open(h5path)
    z = root["ints"]
    assert notes(refs, "ints")["refindex_encoding"] == "json"
    assert [json.loads(t) for t in zvalues(z)] == [s.tolist() for s in seqs]
    got = [json.loads(t) for t in zvalues(root["floats"])]
    assert got[0][0] == 0.5 and math.isnan(got[0][1]) and got[1] == [math.inf]


def test_object_references(h5path):
    with h5py.File(h5path, "w") as f:
        target = f.create_dataset("grp/target", data=np.arange(5))
        g = f["grp"]
        refs_ds = f.create_dataset("refs", shape=(2,), dtype=h5py.ref_dtype)
        refs_ds[0] = target.ref
        refs_ds[1] = g.ref
        f.create_dataset("scalar_ref", data=target.ref, dtype=h5py.ref_dtype)
    refs, root = scan_open(h5path)
    got = [json.loads(t) for t in zvalues(root["refs"])]
    assert got[0]["source"] == "." and got[0]["path"] == "/grp/target"
    assert got[1]["source"] == "." and got[1]["path"] == "/grp"
    # the path leads to the data through the index too
    np.testing.assert_array_equal(zvalues(root[got[0]["path"].lstrip("/")]), np.arange(5))
    assert json.loads(str(zvalues(root["scalar_ref"])[()]))["path"] == "/grp/target"


def test_region_references(h5path):
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("img", data=np.arange(60).reshape(6, 10))
        space = d.id.get_space()
        space.select_elements(np.array([[0, 1], [2, 3], [5, 9]], dtype="u8"))
        points_ref = h5py.h5r.create(d.id, b".", h5py.h5r.DATASET_REGION, space)
        r = f.create_dataset("regions", shape=(3,), dtype=h5py.regionref_dtype)
        r[0] = d.regionref[2:5, 1:3]
        r[1] = points_ref
        r[2] = d.regionref[[0, 4], :]
    refs, root = scan_open(h5path)
    got = [json.loads(t) for t in zvalues(root["regions"])]
    assert all(g["path"] == "/img" and g["source"] == "." for g in got)
    assert got[0]["region"] == {"slices": [[2, 5], [1, 3]]}
    assert got[1]["region"] == {"points": [[0, 1], [2, 3], [5, 9]]}
    assert got[2]["region"] == {"blocks": [[[0, 1], [0, 10]], [[4, 5], [0, 10]]]}


def test_compound_fixed_members(h5path):
    dt = np.dtype({"names": ["a", "b", "arr", "s"], "formats": ["<i2", ">f8", ("<i4", (3,)), "S3"],
                   "offsets": [0, 8, 16, 28], "itemsize": 36})
    data = np.zeros(25, dtype=dt)
    data["a"] = np.arange(25)
    data["b"] = np.linspace(0, 1, 25)
    data["arr"] = np.arange(75).reshape(25, 3)
    data["s"] = [b"abc", b"d"] * 12 + [b""]
    nested = np.dtype([("p", [("x", "<f4"), ("y", "<f4")]), ("q", "<u2")])
    ndata = np.zeros(4, nested)
    ndata["p"]["x"] = [1, 2, 3, 4]
    ndata["q"] = [9, 8, 7, 6]
    with h5py.File(h5path, "w") as f:
        f.create_dataset("cmp", data=data, chunks=(10,))
        f.create_dataset("nested", data=ndata)
    refs, root = scan_open(h5path, inline_threshold=0, inline_dataset_threshold=0)
    z = root["cmp"]
    zv = zvalues(z)
    assert zv.dtype.itemsize == 36  # HDF5's byte layout, padding included
    assert any(n.startswith("refindex_pad_") for n in zv.dtype.names)
    with h5py.File(h5path, "r") as f:
        assert_same_values(f["cmp"][()], zv)
        assert_chunks_referenced(refs, "cmp", f["cmp"], h5path)
        assert_same_values(f["nested"][()], zvalues(root["nested"]))


def test_compound_with_vlen_and_refs(h5path):
    dt = np.dtype([("name", h5py.string_dtype()), ("target", h5py.ref_dtype),
                   ("seq", h5py.vlen_dtype("i4")), ("x", "<f8")])
    with h5py.File(h5path, "w") as f:
        t = f.create_dataset("ts", data=np.arange(3))
        d = f.create_dataset("table", shape=(3,), dtype=dt)
        for i in range(3):
            d[i] = (f"row {i} Δ", t.ref, np.arange(i, dtype="i4"), i / 2)
    refs, root = scan_open(h5path)
    z = root["table"]
    zv = zvalues(z)
    assert all(zv.dtype[n].kind == "U" for n in ("name", "target", "seq"))
    fields = notes(refs, "table")["refindex_fields"]
    assert fields == {"name": "utf8", "target": "json-ref", "seq": "json"}
    assert [str(v) for v in zv["name"]] == [f"row {i} Δ" for i in range(3)]
    assert all(json.loads(str(v))["path"] == "/ts" for v in zv["target"])
    assert [json.loads(str(v)) for v in zv["seq"]] == [list(range(i)) for i in range(3)]
    np.testing.assert_array_equal(zv["x"], np.arange(3) / 2)


def test_array_class_dataset(h5path):
    data = np.arange(24, dtype="<i4").reshape(8, 3)
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("arr", shape=(8,), dtype=np.dtype(("<i4", (3,))), chunks=(4,))
        d[...] = data
    refs, root = scan_open(h5path, inline_threshold=0, inline_dataset_threshold=0)
    z = root["arr"]
    assert z.shape == (8, 3)
    assert_same_values(data, zvalues(z))
    assert len(zattrs(z)["_ARRAY_DIMENSIONS"]) == 2
    with h5py.File(h5path, "r") as f:
        d = f["arr"]
        for i in range(d.id.get_num_chunks()):
            info = d.id.get_chunk_info(i)
            assert_chunk_referenced(refs, f"arr/{info.chunk_offset[0] // 4}.0", h5path, info.byte_offset, info.size)


def test_opaque(h5path):
    data = np.array([b"abcdefgh", b"\x00\x01\x02\x03\x04\x05\x06\x07", b"zzzzzzzz"], dtype="V8")
    with h5py.File(h5path, "w") as f:
        f.create_dataset("op", data=data)
    refs, root = scan_open(h5path)
    zv = zvalues(root["op"])
    assert zv.dtype == np.dtype("V8")
    assert_same_values(h5values(h5path, "op"), zv)


def test_null_dataspace(h5path):
    with h5py.File(h5path, "w") as f:
        f.create_dataset("null", data=h5py.Empty("f4"))
    refs, root = scan_open(h5path)
    z = root["null"]
    # no elements at all: an empty array, never a 0-d one (that would read as a value the file does not hold)
    assert z.shape == (0,) and zvalues(z).shape == (0,) and zvalues(z).dtype == np.dtype("<f4")
    assert zattrs(z)["_ARRAY_DIMENSIONS"] == ["null_dataspace"]
    assert notes(refs, "null")["refindex_null_dataspace"] is True and "refindex_null_dataspace" not in zattrs(z)
    assert refindex.verify(str(h5path), refs).ok


def test_scalar(h5path):
    with h5py.File(h5path, "w") as f:
        f.create_dataset("x", data=np.float64(3.25))
        f.create_dataset("i", data=np.int16(-5))
    refs, root = scan_open(h5path)
    z = root["x"]
    assert z.shape == ()
    assert "x/0" in refs["refs"]
    assert zvalues(z)[()] == 3.25
    assert zvalues(root["i"])[()] == -5 and zvalues(root["i"]).dtype == np.dtype("<i2")


# ------------------------------------------------------------------ attributes


def test_object_reference_attributes(h5path):
    with h5py.File(h5path, "w") as f:
        t = f.create_dataset("a/target", data=[1, 2])
        f["a"].attrs["table"] = t.ref
        f.attrs["group_ref"] = f["a"].ref
    refs, root = scan_open(h5path)
    v = root["a"].attrs["table"]
    assert v["zarr_dtype"] == "object"
    assert v["value"]["source"] == "." and v["value"]["path"] == "/a/target"
    assert root.attrs["group_ref"]["value"]["path"] == "/a"


def test_empty_attributes(h5path):
    with h5py.File(h5path, "w") as f:
        f.attrs["empty_f"] = h5py.Empty("f8")
        f.attrs["empty_s"] = h5py.Empty("S1")
        f.create_dataset("d", data=[1]).attrs["empty"] = h5py.Empty("i4")
    refs, root = scan_open(h5path)  # plain: as netCDF readers hand them over (text "", else an empty array)
    assert "empty_f" in root.attrs and root.attrs["empty_f"] == []
    assert root.attrs["empty_s"] == ""
    assert root["d"].attrs["empty"] == []
    refs, root = scan_open(h5path, convention="hdmf")  # HDMF: no value
    assert root.attrs["empty_f"] is None and root.attrs["empty_s"] is None and root["d"].attrs["empty"] is None


def test_nan_inf_attributes(h5path):
    with h5py.File(h5path, "w") as f:
        f.attrs["nan"] = np.nan
        f.attrs["inf"] = np.inf
        f.attrs["ninf"] = -np.inf
        f.attrs["arr"] = np.array([1.0, np.nan, np.inf])
        f.attrs["text"] = "Δt ü"
        f.attrs["ints"] = np.arange(3, dtype="u8")
    refs, root = scan_open(h5path)
    a = root.attrs
    assert math.isnan(a["nan"]) and a["inf"] == math.inf and a["ninf"] == -math.inf
    assert a["arr"][0] == 1.0 and math.isnan(a["arr"][1]) and a["arr"][2] == math.inf
    assert a["text"] == "Δt ü"
    assert a["ints"] == [0, 1, 2]


def test_dimension_scales(h5path):
    with h5py.File(h5path, "w") as f:
        x = f.create_dataset("x", data=np.arange(4.0))
        x.make_scale("x axis name")
        t = f.create_dataset("grp/time", data=np.arange(3))
        t.make_scale()
        d = f.create_dataset("grp/data", data=np.zeros((3, 4, 2)))
        d.dims[0].attach_scale(t)
        d.dims[1].attach_scale(x)
        d.attrs["units"] = "m"
        f.create_dataset("plain", data=np.zeros((2, 5)))
        f.create_dataset("scalar", data=1.0)
    refs, root = scan_open(h5path)
    dims = zattrs(root["grp/data"])["_ARRAY_DIMENSIONS"]
    assert dims[0] == "time" and dims[1] == "x"
    assert dims[2].startswith("phony_dim_")
    assert zattrs(root["x"])["_ARRAY_DIMENSIONS"] == ["x"]
    assert zattrs(root["grp/time"])["_ARRAY_DIMENSIONS"] == ["time"]
    plain = zattrs(root["plain"])["_ARRAY_DIMENSIONS"]
    assert len(plain) == 2 and all(n.startswith("phony_dim_") for n in plain) and plain[0] != plain[1]
    hidden = {"DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME", "_Netcdf4Dimid"}
    for key in ("x", "grp/time", "grp/data", "plain"):
        assert not hidden & set(zattrs(root[key])), (key, zattrs(root[key]))
    assert zattrs(root["grp/data"])["units"] == "m"
    # every array, scalars included, names one dimension per axis
    for key, value in refs["refs"].items():
        if key.endswith(".zarray"):
            prefix = key[: -len(".zarray")]
            shape = json.loads(value)["shape"]
            assert len(json.loads(refs["refs"][prefix + ".zattrs"])["_ARRAY_DIMENSIONS"]) == len(shape), key


# ------------------------------------------------------------------ storage


def test_unallocated_chunks_read_as_fill_value(h5path):
    with h5py.File(h5path, "w") as f:
        f.create_dataset("default", shape=(20,), dtype="<i4", chunks=(5,))[5:10] = np.arange(5)
        f.create_dataset("nan", shape=(20,), dtype="<f8", chunks=(5,), fillvalue=np.nan)[5:10] = 1.5
        f.create_dataset("user", shape=(4, 6), dtype=">i2", chunks=(2, 3), fillvalue=-7)[0:2, 3:6] = 3
        f.create_dataset("cplx", shape=(6,), dtype="<c8", chunks=(3,), fillvalue=1 + 2j)[0:3] = 0
        f.create_dataset("never", shape=(6,), dtype="<u2", fillvalue=11)  # contiguous, never written
        f.create_dataset("never_chunked", shape=(6,), dtype="<f4", chunks=(2,), fillvalue=np.inf)
        f.create_dataset("str", shape=(6,), dtype="S4", chunks=(2,), fillvalue=b"ab")[0:2] = [b"x", b"yyyy"]
        cdt = np.dtype([("a", ">i4"), ("b", "<f8")])
        f.create_dataset("cmp", shape=(6,), dtype=cdt, chunks=(2,),
                         fillvalue=np.array((5, np.nan), cdt))[0:2] = np.array([(1, 2.0), (3, 4.0)], cdt)
        f.create_dataset("flag", shape=(6,), dtype=bool, chunks=(2,), fillvalue=True)[0:2] = False
    refs, root = scan_open(h5path)
    # fill_value null (no _FillValue attribute: xarray must mask nothing), which zarr reads as zeros:
    # never-written chunks of another fill value are in the index, one encoded fill chunk each
    assert "default/0" not in refs["refs"] and "default/1" in refs["refs"]
    assert all(json.loads(v)["fill_value"] is None for k, v in refs["refs"].items() if k.endswith(".zarray"))
    assert refs["refs"]["nan/2"] == refs["refs"]["nan/3"] and refs["refs"]["nan/2"].startswith("base64:")
    assert refs["refs"]["never/0"].startswith("base64:")
    with h5py.File(h5path, "r") as f:
        for name in ("default", "nan", "user", "cplx", "never", "never_chunked", "str", "cmp", "flag"):
            assert_same_values(f[name][()], zvalues(root[name]))


_FRESH_SCAN = """
import json, sys
import refindex
refs = refindex.scan(sys.argv[1])
print(json.dumps({"plugins": "hdf5plugin" in sys.modules, "refs": refs}))
"""


def test_filter_plugins_loaded_when_a_dataset_needs_them(tmp_path):
    """A fresh process imports hdf5plugin (~20 ms) only for a file with a filter libhdf5 lacks, and
    then libhdf5 decodes it: the small dataset is copied into the index, its values are h5py's."""
    data = np.arange(60, dtype="<i4").reshape(6, 10)
    plain, plugin = tmp_path / "gzip.h5", tmp_path / "zstd.h5"
    with h5py.File(plain, "w") as f:
        f.create_dataset("x", data=data, chunks=(3, 10), compression="gzip")
    with h5py.File(plugin, "w") as f:
        f.create_dataset("x", data=data, chunks=(3, 10), **hdf5plugin.Zstd())
    out = {}
    for path in (plain, plugin):
        run = subprocess.run([sys.executable, "-c", _FRESH_SCAN, str(path)], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        assert run.returncode == 0, run.stderr[-2000:]
        out[path.name] = json.loads(run.stdout.strip().splitlines()[-1])
    assert not out["gzip.h5"]["plugins"] and out["zstd.h5"]["plugins"]
    for name, got in out.items():
        assert isinstance(got["refs"]["refs"]["x/0.0"], str), name  # copied in: decoded by libhdf5
        assert_same_values(data, zvalues(consumer_open(got["refs"])["x"]))


@pytest.mark.parametrize(
    "name",
    ["gzip", "shuffle_gzip", "fletcher32", "shuffle_fletcher32_gzip", "lzf", "szip", "blosc", "blosc_zstd",
     "zstd", "lz4", "bzip2", "bitshuffle", "bitshuffle_lz4", "bitshuffle_zstd"],
)
def test_filters(h5path, name):
    rng = np.random.default_rng(20240611)  # its own: which tests ran before in this process must not matter
    data = (np.arange(100 * 37, dtype="<i4").reshape(100, 37) % 97) * 1000 + rng.integers(0, 9, (100, 37))
    data = data.astype("<i4")
    kw = {
        "gzip": dict(compression="gzip", compression_opts=6),
        "shuffle_gzip": dict(compression="gzip", shuffle=True),
        "fletcher32": dict(fletcher32=True),
        "shuffle_fletcher32_gzip": dict(shuffle=True, fletcher32=True, compression="gzip"),
        "lzf": dict(compression="lzf"),
        "szip": dict(compression="szip", compression_opts=("nn", 8)),
        "blosc": dict(**hdf5plugin.Blosc(cname="lz4", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE)),
        "blosc_zstd": dict(**hdf5plugin.Blosc(cname="zstd", clevel=3, shuffle=hdf5plugin.Blosc.BITSHUFFLE)),
        "zstd": dict(**hdf5plugin.Zstd()),
        "lz4": dict(**hdf5plugin.LZ4()),
        "bzip2": dict(**hdf5plugin.BZip2()),
        "bitshuffle": dict(**hdf5plugin.Bitshuffle(cname="none")),
        "bitshuffle_lz4": dict(**hdf5plugin.Bitshuffle(cname="lz4")),
        "bitshuffle_zstd": dict(**hdf5plugin.Bitshuffle(cname="zstd")),
    }[name]
    if name == "szip" and not h5py.h5z.filter_avail(h5py.h5z.FILTER_SZIP):
        pytest.skip("this h5py cannot write szip")
    try:
        with h5py.File(h5path, "w") as f:
            f.create_dataset("x", data=data, chunks=(16, 10), **kw)
    except (ValueError, OSError) as e:
        if name == "szip":
            pytest.skip(f"this h5py cannot write szip: {e}")
        raise
    refs, root = scan_open(h5path, inline_threshold=0, inline_dataset_threshold=0)
    assert_same_values(data, zvalues(root["x"]))
    assert root["x"][3:40, 5:21].tolist() == data[3:40, 5:21].tolist()  # partial reads across chunks
    with h5py.File(h5path, "r") as f:
        d = f["x"]
        masks = {d.id.get_chunk_info(i).filter_mask for i in range(d.id.get_num_chunks())}
        if masks == {0}:
            assert assert_chunks_referenced(refs, "x", d, h5path) == 7 * 4
        else:  # optional filter skipped on some chunks (szip on hard data): those may be inlined
            assert name == "szip", masks
            assert any(isinstance(v, list) for k, v in refs["refs"].items() if k.startswith("x/"))


def test_custom_codecs_need_only_zarr(tmp_path):
    """Indexes using refindex's own HDF5-framing codecs (bitshuffle+LZ4; LZF squeezed beyond
    the stock decoder's 8x) open in a fresh process that only uses fsspec + zarr: the codecs
    are found through numcodecs entry points."""
    data = np.arange(3000, dtype="<f4").reshape(100, 30)
    h5 = tmp_path / "codecs.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("lzf", data=data * 0, chunks=(10, 30), compression="lzf")
        f.create_dataset("bitshuffle", data=data, chunks=(10, 30), **hdf5plugin.Bitshuffle(cname="lz4"))
    refs = scan(h5, inline_threshold=0, inline_dataset_threshold=0)
    assert json.loads(refs["refs"]["lzf/.zarray"])["compressor"]["id"] == "refindex_h5lzf"
    assert json.loads(refs["refs"]["bitshuffle/.zarray"])["compressor"]["id"] == "refindex_h5bitshuffle"
    data = {"lzf": data * 0, "bitshuffle": data}
    (tmp_path / "refs.json").write_text(json.dumps(refs))
    np.savez(tmp_path / "expected.npz", **data)
    code = textwrap.dedent(
        f"""
        import json, sys, fsspec, zarr, numpy as np
        refs = json.load(open({str(tmp_path / "refs.json")!r}))
        expected = np.load({str(tmp_path / "expected.npz")!r})
        fs = fsspec.filesystem("reference", fo=refs, asynchronous=True)
        root = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=2)
        names = sorted(root.array_keys())
        for name in names:
            assert np.array_equal(root[name][...], expected[name]), name
        print(",".join(names))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().split(",") == ["bitshuffle", "lzf"]


MASKED_FILTERS = {
    "lzf": dict(compression="lzf"),
    "lz4": dict(**hdf5plugin.LZ4()),
    "bitshuffle_lz4": dict(**hdf5plugin.Bitshuffle(cname="lz4")),
    "fletcher32_gzip": dict(fletcher32=True, compression="gzip"),
    "blosc": dict(**hdf5plugin.Blosc()),
    "zstd": dict(**hdf5plugin.Zstd()),
}


def test_chunks_with_filter_mask(h5path):
    data = np.arange(40, dtype="<i4").reshape(4, 10)
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("g", shape=(4, 10), dtype="<i4", chunks=(2, 5), compression="gzip")
        d[0:2, 0:5] = data[0:2, 0:5]
        d[2:4, 5:10] = data[2:4, 5:10]
        d.id.write_direct_chunk((0, 5), data[0:2, 5:10].tobytes(), filter_mask=1)  # gzip skipped
        s = f.create_dataset("sg", shape=(4, 10), dtype="<i4", chunks=(2, 5), shuffle=True, compression="gzip")
        s[0:2, 0:5] = data[0:2, 0:5]
        s.id.write_direct_chunk((2, 0), data[2:4, 0:5].tobytes(), filter_mask=0b11)  # both skipped
        shuffled = numcodecs.Shuffle(elementsize=4).encode(np.ascontiguousarray(data[2:4, 5:10]))
        s.id.write_direct_chunk((2, 5), bytes(shuffled), filter_mask=0b10)  # only gzip skipped
        for name, kw in MASKED_FILTERS.items():
            m = f.create_dataset(name, shape=(4, 10), dtype="<i4", chunks=(2, 5), **kw)
            m[0:2, 0:5] = data[0:2, 0:5]
            m.id.write_direct_chunk((2, 0), data[2:4, 0:5].tobytes(), filter_mask=0b11)
        if h5py.h5z.filter_avail(h5py.h5z.FILTER_SZIP):
            # libhdf5 itself stores szip chunks raw (mask 1) when they do not shrink
            noise = RNG.integers(-(2**31), 2**31 - 1, (64, 10), dtype="<i4")
            noise[:32] = np.arange(320).reshape(32, 10)  # these chunks compress
            f.create_dataset("szip", data=noise, chunks=(16, 5), compression="szip")
    with h5py.File(h5path, "r") as f:
        assert f["g"].id.get_chunk_info_by_coord((0, 5)).filter_mask == 1
        expected = {n: f[n][()] for n in f}
        if "szip" in f:
            z = f["szip"].id
            assert {z.get_chunk_info(i).filter_mask for i in range(z.get_num_chunks())} == {0, 1}
    refs, root = scan_open(h5path, inline_threshold=0, inline_dataset_threshold=0)
    for n, values in expected.items():
        assert_same_values(values, zvalues(root[n]))


def test_unsupported_filter_small_is_inlined(h5path):
    data = np.arange(50, dtype="<i4") * 3 + 100
    with h5py.File(h5path, "w") as f:
        f.create_dataset("so", data=data, chunks=(10,), scaleoffset=0)
        f.create_dataset("sof", data=np.linspace(0, 1, 30), chunks=(10,), scaleoffset=3)
    refs, root = scan_open(h5path)
    assert "refindex_inlined" in notes(refs, "so")
    assert not any(isinstance(v, list) for k, v in refs["refs"].items() if k.startswith("so/"))
    with h5py.File(h5path, "r") as f:
        assert_same_values(f["so"][()], zvalues(root["so"]))
        assert_same_values(f["sof"][()], zvalues(root["sof"]))


def test_unsupported_filter_too_big_errors(h5path):
    with h5py.File(h5path, "w") as f:
        f.create_dataset("grp/so", data=np.arange(500, dtype="<i4"), chunks=(100,), scaleoffset=0)
    with pytest.raises(refindex.UnsupportedError) as info:
        refindex.scan(str(h5path), inline_max=100)
    msg = str(info.value)
    assert str(h5path) in msg and "/grp/so" in msg
    assert info.value.path == "/grp/so"
    assert "scaleoffset" in msg


def test_unsupported_filter_skip(h5path):
    with h5py.File(h5path, "w") as f:
        f.create_dataset("grp/so", data=np.arange(500, dtype="<i4"), chunks=(100,), scaleoffset=0)
        f.create_dataset("grp/ok", data=np.arange(5))
    refs, root = scan_open(h5path, inline_max=100, on_unsupported="skip")
    assert "grp/so/.zarray" not in refs["refs"]
    assert "so" not in root["grp"]
    skipped = refs["refindex"]["skipped"]
    assert [s["path"] for s in skipped] == ["/grp/so"] and skipped[0]["reason"]
    np.testing.assert_array_equal(zvalues(root["grp/ok"]), np.arange(5))


def test_contiguous_virtual_chunks(h5path):
    a = np.arange(100, dtype="<i4")  # 400 bytes -> chunks of 30 elements, last one partial
    b = RNG.normal(size=(11, 7))  # 616 bytes, rows of 56 bytes -> chunks (2, 7), last one partial
    with h5py.File(h5path, "w") as f:
        f.create_dataset("a", data=a)
        f.create_dataset("b_last", data=b)  # written last: its data ends at the end of the file
    with h5py.File(h5path, "r") as f:
        off_a = f["a"].id.get_offset()
        off_b = f["b_last"].id.get_offset()
    assert off_b + b.nbytes == os.path.getsize(h5path)
    refs, root = scan_open(h5path, contiguous_chunk_bytes=120, inline_threshold=0, inline_dataset_threshold=0)
    za, zb = root["a"], root["b_last"]
    assert za.chunks == (30,) and zb.chunks == (2, 7)
    assert_same_values(a, zvalues(za))
    assert_same_values(b, zvalues(zb))
    assert_same_values(a[25:95], za[25:95])
    for i in range(4):
        assert_chunk_referenced(refs, f"a/{i}", h5path, off_a + i * 120, 120)
    for i in range(5):  # chunks fully inside the file are references
        assert_chunk_referenced(refs, f"b_last/{i}.0", h5path, off_b + i * 112, 112)
    # the last chunk would run past the end of the file: inlined, padded to full size
    assert refs["refs"]["b_last/5.0"].startswith("base64:")
    assert len(base64.b64decode(refs["refs"]["b_last/5.0"][7:])) == 112
    # single chunk when the option is off
    refs2, root2 = scan_open(h5path, contiguous_chunk_bytes=None, inline_threshold=0, inline_dataset_threshold=0)
    assert root2["a"].chunks == (100,)
    assert_chunk_referenced(refs2, "a/0", h5path, off_a, 400)


def test_contiguous_last_chunk_past_eof(h5path):
    b = np.arange(50, dtype="<f8")  # 400 bytes, chunks of 16 elements: last chunk would run past EOF
    with h5py.File(h5path, "w") as f:
        f.create_dataset("b", data=b)
    with h5py.File(h5path, "r") as f:
        off = f["b"].id.get_offset()
    assert off + b.nbytes == os.path.getsize(h5path)
    refs, root = scan_open(h5path, contiguous_chunk_bytes=128, inline_threshold=0, inline_dataset_threshold=0)
    assert root["b"].chunks == (16,)
    assert_same_values(b, zvalues(root["b"]))
    assert_chunk_referenced(refs, "b/2", h5path, off + 256, 128)
    assert refs["refs"]["b/3"].startswith("base64:")  # padded inline copy of the 16-byte tail


def test_compact_layout(h5path):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    data = np.arange(30, dtype=">i2").reshape(5, 6)
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("c", data=data, dcpl=dcpl)
        assert d.id.get_create_plist().get_layout() == h5py.h5d.COMPACT
    refs, root = scan_open(h5path, inline_threshold=0, inline_dataset_threshold=0)
    chunk_vals = [v for k, v in refs["refs"].items() if k.startswith("c/") and not k.split("/")[-1].startswith(".")]
    assert chunk_vals and all(isinstance(v, str) for v in chunk_vals)
    assert_same_values(data, zvalues(root["c"]))


def test_user_block(h5path):
    data = np.arange(1000, dtype="<i4")
    with h5py.File(h5path, "w", userblock_size=512) as f:
        f.create_dataset("contig", data=data)
        f.create_dataset("chunked", data=data, chunks=(300,), compression="gzip")
        f.create_dataset("unwritten", shape=(10,), dtype="<f4", fillvalue=2.5)
    with open(h5path, "r+b") as fh:
        fh.write(b"user block text")
    refs, root = scan_open(h5path, inline_threshold=0, inline_dataset_threshold=0)
    with h5py.File(h5path, "r") as f:
        assert f.userblock_size == 512
        assert_chunk_referenced(refs, "contig/0", h5path, f["contig"].id.get_offset(), 4000)
        assert_chunks_referenced(refs, "chunked", f["chunked"], h5path)
        for n in ("contig", "chunked", "unwritten"):
            assert_same_values(f[n][()], zvalues(root[n]))


def test_external_raw_storage(h5path, tmp_path, monkeypatch):
    data = np.arange(200, dtype="<f8")
    ext = tmp_path / "raw.bin"
    ext.write_bytes(b"H" * 64 + data.tobytes() + b"T" * 10)
    with h5py.File(h5path, "w") as f:
        f.create_dataset("ext", shape=(200,), dtype="<f8", external=[(str(ext), 64, data.nbytes)])
    # relative name: HDF5 resolves it against the working directory; run both from tmp_path
    monkeypatch.chdir(tmp_path)
    rel = tmp_path / "rel.h5"
    (tmp_path / "rel.bin").write_bytes(data.tobytes())
    with h5py.File(rel, "w") as f:
        f.create_dataset("ext", shape=(200,), dtype="<f8", external=[("rel.bin", 0, h5py.h5f.UNLIMITED)])
    refs, root = scan_open(h5path, inline_threshold=0, inline_dataset_threshold=0)
    assert_same_values(data, zvalues(root["ext"]))
    assert_chunk_referenced(refs, "ext/0", ext, 64, data.nbytes)
    refs2, root2 = scan_open(rel, inline_threshold=0, inline_dataset_threshold=0)
    assert_same_values(data, zvalues(root2["ext"]))
    assert_chunk_referenced(refs2, "ext/0", tmp_path / "rel.bin", 0, data.nbytes)


def test_external_storage_in_several_files(tmp_path, monkeypatch):
    """Segments in several files are read beside the HDF5 file (not from the working directory,
    where libhdf5 would look); bytes past the end of a short file read as zeros, as in libhdf5."""
    data = np.arange(300, dtype=">i4")
    here = tmp_path / "data"
    here.mkdir()
    (here / "a.bin").write_bytes(b"x" * 16 + data[:100].tobytes())
    (here / "b.bin").write_bytes(data[100:250].tobytes())  # 50 values short of its segment
    with h5py.File(here / "multi.h5", "w") as f:
        f.create_dataset("ext", shape=(300,), dtype=">i4",
                         external=[("a.bin", 16, 400), ("b.bin", 0, h5py.h5f.UNLIMITED)])
    monkeypatch.chdir(here)  # libhdf5 resolves the names against the working directory
    with h5py.File(here / "multi.h5", "r") as f:
        expected = f["ext"][()]
    assert np.array_equal(expected[:250], data[:250]) and not expected[250:].any()
    decoys = tmp_path / "elsewhere"
    decoys.mkdir()
    for name in ("a.bin", "b.bin"):
        (decoys / name).write_bytes(b"\xff" * 2000)
    monkeypatch.chdir(decoys)  # same names, other bytes: must not be what the index holds
    refs, root = scan_open(here / "multi.h5")
    assert_same_values(expected, zvalues(root["ext"]))
    assert notes(refs, "ext")["refindex_external_storage"] == ["a.bin", "b.bin"]
    (here / "b.bin").unlink()
    with pytest.raises(refindex.RefindexError, match="b.bin is missing"):
        refindex.scan(here / "multi.h5")


def test_virtual_dataset(h5path, tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("src", data=np.arange(10, 20, dtype="<i4"))
    with h5py.File(h5path, "w") as f:
        f.create_dataset("local", data=np.arange(10, dtype="<i4"))
        layout = h5py.VirtualLayout(shape=(3, 10), dtype="<i4")
        layout[0] = h5py.VirtualSource(f["local"])
        layout[1] = h5py.VirtualSource(str(other), "src", shape=(10,))
        f.create_virtual_dataset("vds", layout, fillvalue=-1)
    refs, root = scan_open(h5path)
    with h5py.File(h5path, "r") as f:
        expected = f["vds"][()]
    assert expected[2].tolist() == [-1] * 10
    assert_same_values(expected, zvalues(root["vds"]))


def test_resizable_partially_written(h5path):
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("r", shape=(5, 10), maxshape=(None, 10), chunks=(8, 4), dtype="<f4", fillvalue=-1)
        d[...] = np.arange(50).reshape(5, 10)
        d.resize((21, 10))
        d[12:14, 3:5] = 7
        e = f.create_dataset("grow", shape=(0,), maxshape=(None,), chunks=(4,), dtype="<i8")
        for i in range(3):
            e.resize((e.shape[0] + 3,))
            e[-3:] = i
    refs, root = scan_open(h5path, inline_threshold=0, inline_dataset_threshold=0)
    with h5py.File(h5path, "r") as f:
        assert_chunks_referenced(refs, "r", f["r"], h5path)
        for n in ("r", "grow"):
            assert_same_values(f[n][()], zvalues(root[n]))
            assert root[n].shape == f[n].shape


def test_zero_size(h5path):
    with h5py.File(h5path, "w") as f:
        f.create_dataset("contig", shape=(0, 5), dtype="<i4")
        f.create_dataset("chunked", shape=(0, 5), maxshape=(None, 5), chunks=(4, 5), dtype="<f8")
        f.create_dataset("empty_str", shape=(0,), dtype=h5py.string_dtype())
    refs, root = scan_open(h5path)
    assert root["contig"].shape == (0, 5)
    assert zvalues(root["contig"]).shape == (0, 5)
    assert zvalues(root["chunked"]).shape == (0, 5)
    assert zvalues(root["empty_str"]).shape == (0,)


# ------------------------------------------------------------------ names and links


SPECIAL = ["Δt", "axis#property", "rows,columns#property", "a.b", "with space", "x%20y", "0", "ü.grp"]


def test_special_names(h5path):
    with h5py.File(h5path, "w") as f:
        for i, name in enumerate(SPECIAL):
            f.create_dataset(name, data=np.arange(3) + i)
            f.create_dataset(f"grp #{i}/{name}", data=np.arange(2) - i)
    refs, root = scan_open(h5path)
    assert set(SPECIAL) <= set(root.array_keys())
    for i, name in enumerate(SPECIAL):
        np.testing.assert_array_equal(zvalues(root[name]), np.arange(3) + i)
        np.testing.assert_array_equal(zvalues(root[f"grp #{i}"][name]), np.arange(2) - i)
        assert name in list(root[f"grp #{i}"].array_keys())


def test_backslash_name_is_an_error(h5path):
    with h5py.File(h5path, "w") as f:
        f.create_dataset("a\\b", data=[1, 2])
    with pytest.raises(refindex.RefindexError) as info:
        refindex.scan(str(h5path))
    assert "a\\b" in str(info.value)


def test_hard_links(h5path):
    data = np.arange(1000, dtype="<i8")
    with h5py.File(h5path, "w") as f:
        f.create_dataset("g/a", data=data, chunks=(100,))
        f["h/b"] = f["g/a"]  # second hard link to the same dataset
        f["h2"] = f["g"]  # second hard link to a group
    refs, root = scan_open(h5path, convention="plain", inline_dataset_threshold=0)
    for key in ("g/a", "h/b", "h2/a"):
        assert_same_values(data, zvalues(root[key]))
    # the data is referenced under each name, never copied
    assert refs["refs"]["h/b/3"] == refs["refs"]["g/a/3"]
    assert isinstance(refs["refs"]["g/a/3"], list)


def test_soft_links(h5path):
    data = np.arange(20, dtype="<f4")
    with h5py.File(h5path, "w") as f:
        f.create_dataset("real/d", data=data)
        f["alias"] = h5py.SoftLink("/real/d")
        f["real/rel"] = h5py.SoftLink("d")
        f["dangling"] = h5py.SoftLink("/nowhere")
    refs, root = scan_open(h5path, convention="plain")
    assert_same_values(data, zvalues(root["alias"]))
    assert_same_values(data, zvalues(root["real/rel"]))
    assert "dangling" not in root
    assert any(e["name"] == "dangling" for e in notes(refs, "")["zarr_link"]) and "zarr_link" not in root.attrs


# ------------------------------------------------------------------ whole files


def _mixed_file(path):
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "mixed"
        f.attrs["nan"] = np.nan
        f.create_dataset("a", data=np.arange(1000.0), chunks=(64,), compression="gzip")
        f.create_dataset("s", data=["x", "yz"], dtype=h5py.string_dtype())
        f.create_dataset("g/c", data=np.arange(12).reshape(3, 4))
        f["g/c"].make_scale()
        f.create_dataset("g/v", data=np.zeros((3, 2))).dims[0].attach_scale(f["g/c"])
        f["link"] = h5py.SoftLink("/a")
        f.create_dataset("r", data=[f["a"].ref], dtype=h5py.ref_dtype)


def test_deterministic_output(h5path):
    _mixed_file(h5path)
    first = formats.dumps(refindex.scan(str(h5path)))
    second = formats.dumps(refindex.scan(str(h5path)))
    assert first == second


def test_not_hdf5(tmp_path):
    bad = tmp_path / "text.h5"
    bad.write_text("this is not an HDF5 file\n" * 100)
    with pytest.raises(refindex.NotHDF5Error):
        refindex.scan(str(bad))
    out = tmp_path / "out.json"
    with pytest.raises(refindex.RefindexError):
        refindex.scan_to_file(str(bad), out)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text.h5"]


def test_truncated_file(tmp_path):
    good = tmp_path / "good.h5"
    with h5py.File(good, "w") as f:
        for i in range(5):
            f.create_dataset(f"d{i}", data=np.arange(5000) + i, chunks=(500,), compression="gzip")
            f[f"d{i}"].attrs["i"] = i
    raw = good.read_bytes()
    cut = tmp_path / "cut.h5"
    cut.write_bytes(raw[: len(raw) // 3])
    out = tmp_path / "cut.json"
    with pytest.raises(refindex.RefindexError):
        refindex.scan_to_file(str(cut), out)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".refindex-")]


def test_netcdf4_file_with_xarray(tmp_path):
    xr = pytest.importorskip("xarray")
    netCDF4 = pytest.importorskip("netCDF4")
    path = tmp_path / "data.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.title = "test"
        nc.createDimension("time", None)
        nc.createDimension("lat", 4)
        nc.createDimension("lon", 5)
        nc.createDimension("nv", 2)  # a dimension without a coordinate variable
        t = nc.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        lat = nc.createVariable("lat", "f4", ("lat",))
        lat.units = "degrees_north"
        lon = nc.createVariable("lon", "f4", ("lon",))
        temp = nc.createVariable("temp", "f4", ("time", "lat", "lon"), zlib=True, fill_value=-999.0,
                                 chunksizes=(2, 4, 5))
        temp.units = "K"
        bnds = nc.createVariable("lat_bnds", "f4", ("lat", "nv"))
        t[:] = np.arange(3)
        lat[:] = np.linspace(-45, 45, 4)
        lon[:] = np.linspace(0, 360, 5, endpoint=False)
        temp[:] = RNG.normal(280, 5, (3, 4, 5)).astype("f4")
        temp[1, 2, 3] = np.ma.masked
        bnds[:] = np.arange(8).reshape(4, 2)
    refs = scan(path)
    got = xr.open_dataset(consumer_store(refs), engine="zarr", consolidated=False, zarr_format=2)
    want = xr.open_dataset(path, engine="h5netcdf")
    try:
        assert got["temp"].dims == ("time", "lat", "lon")
        assert got["lat_bnds"].dims == ("lat", "nv")
        for name in ("temp", "lat_bnds", "time", "lat", "lon"):
            xr.testing.assert_equal(got[name], want[name])
        assert np.isnan(got["temp"].values[1, 2, 3])
        assert got.attrs["title"] == "test"
        assert got["temp"].attrs["units"] == "K"
        assert set(got.data_vars) == set(want.data_vars)
        assert set(got.coords) == set(want.coords)
        assert refindex.verify(str(path), refs).ok
    finally:
        got.close()
        want.close()


def test_verify_reports_exact(h5path):
    _mixed_file(h5path)
    refs = refindex.scan(str(h5path))
    report = refindex.verify(str(h5path), refs)
    assert report.ok, report.summary()
    assert {r.status for r in report.results} == {"exact"}
    assert {r.path for r in report.results} >= {"/a", "/s", "/g/c", "/g/v", "/link", "/r"}


def test_many_tiny_chunks_inline_in_bulk_reads(tmp_path):
    """More than BULK_INLINE chunks below the inline threshold: read in merged ranges, values exact."""
    from refindex.scanner import BULK_INLINE

    path = tmp_path / "tiny.h5"
    rng = np.random.default_rng(7)
    data = rng.integers(0, 255, (160, 100), dtype="u1")
    with h5py.File(path, "w") as f:
        f.create_dataset("t", data=data, chunks=(1, 1), compression="gzip")  # 16,000 tiny gzip chunks
    assert 160 * 100 > BULK_INLINE
    refs, root = scan_open(path)
    assert all(isinstance(refs["refs"][f"t/{i}.{j}"], str) for i in (0, 80, 159) for j in (0, 99))  # inline
    np.testing.assert_array_equal(root["t"][...], data)


@pytest.mark.parametrize("prealloc", [0, 1500, 1 << 24])
def test_chunk_table_paths_agree(tmp_path, prealloc):
    """Chunk coordinates go into a table allocated for the grid; past its rows they grow in a
    buffer (0: all of them; 1500: the table fills in the middle of a batch): same table."""
    from refindex.scanner import GRID_PREALLOCATE, chunk_table

    path = tmp_path / "sparse.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=(40, 30), chunks=(3, 4), dtype="<i2", compression="gzip", fillvalue=-1)
        d[::7, ::5] = np.arange(36, dtype="<i2").reshape(6, 6)  # a scattered subset of chunks
        f.create_dataset("y", data=np.arange(5000, dtype="<f4").reshape(50, 100), chunks=(5, 7))
        f.create_dataset("z", data=np.arange(30000, dtype="<u2").reshape(60, 500), chunks=(1, 10))  # 3000 chunks
    with h5py.File(path, "r") as f:
        for name in ("x", "y", "z"):
            d = f[name]
            want, want_masks = chunk_table(d, d.ndim, d.chunks, preallocate=GRID_PREALLOCATE)
            got, masks = chunk_table(d, d.ndim, d.chunks, preallocate=prealloc)
            assert len(got) == d.id.get_num_chunks() == len(want)
            for column in ("coords", "offsets", "sizes"):
                np.testing.assert_array_equal(getattr(got, column), getattr(want, column))
            np.testing.assert_array_equal(masks, want_masks)
            infos = [d.id.get_chunk_info(i) for i in range(d.id.get_num_chunks())]
            assert got.offsets.tolist() == [i.byte_offset for i in infos]
            assert got.coords.tolist() == [[o // c for o, c in zip(i.chunk_offset, d.chunks)] for i in infos]
    refs, root = scan_open(path, inline_threshold=0, inline_dataset_threshold=0)
    with h5py.File(path, "r") as f:
        for name in ("x", "y", "z"):
            assert_same_values(f[name][()], zvalues(root[name]))


def test_scan_progress_reports_datasets_and_chunks(tmp_path, capsys):
    """The progress hooks see every dataset once and every listed chunk; progress=True draws a bar."""
    path = tmp_path / "p.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("a/big", data=np.arange(20000, dtype="<i4").reshape(200, 100), chunks=(2, 10))  # 1,000
        f.create_dataset("a/small", data=np.arange(10))
        f.create_dataset("b", data=np.zeros((30, 30)), chunks=(10, 10))  # 9 chunks
        f["alias"] = f["b"]  # a hard link: one dataset, visited once

    class Recorder:
        def __init__(self):
            self.events = []

        def start(self, datasets):
            self.events.append(("start", datasets))

        def chunks(self, n):
            self.events.append(("chunks", n))

        def dataset_done(self):
            self.events.append(("done", 1))

        def close(self):
            self.events.append(("close", 0))

    rec = Recorder()
    refindex.scan(path, progress=rec)
    assert rec.events[0] == ("start", 3) and rec.events[-1] == ("close", 0)
    assert sum(n for e, n in rec.events if e == "done") == 3
    assert sum(n for e, n in rec.events if e == "chunks") == 1000 + 9
    refindex.scan(path, progress=True)
    err = capsys.readouterr().err
    assert "scanning p.h5" in err and "3/3" in err and "1,009 chunks listed" in err


def test_filters_without_codec_decode_in_a_fresh_process(tmp_path):
    """A filter zarr has no codec for (zfp) is decoded by libhdf5 and inlined: refindex loads the
    filter plugins itself, a caller need not have imported hdf5plugin."""
    path = tmp_path / "zfp.h5"
    data = np.linspace(0, 1, 64 * 64, dtype="f4").reshape(64, 64)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(16, 16), **hdf5plugin.Zfp(reversible=True))
    code = ("import json, sys, refindex\nrefs = refindex.scan(sys.argv[1])\n"
            "print(refs['refindex']['hidden_attributes']['/x']['refindex_inlined'])")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "no zarr codec" in out.stdout
    refs, root = scan_open(path)
    assert_same_values(h5values(path, "x"), zvalues(root["x"]))
