"""Indexes any zarr reader opens with stock codecs (issue #13).

Each HDF5 filter maps to a numcodecs or imagecodecs codec where one decodes the stored
bytes exactly; the chunks h5py/hdf5plugin write are read back in an interpreter that
cannot import refindex (tests/stockenv.py) and compared with h5py.  Types zarr has no
data type for, numbers in layouts numpy lacks and fixed-length strings libhdf5 changes
on read get representations zarr opens.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin
import numpy as np
import pytest

import refindex
from refindex.testing.portability import (LONG_VALUES, STRINGS, write_large_dirty_strings,
                                          write_portability_zoo)
from conftest import notes
from stockenv import StockReader, stock_verify

ROWS, COLS = 100, 37


def filter_data() -> np.ndarray:
    """Smooth rows (compress well) and random rows (optional filters skip those chunks)."""
    rng = np.random.default_rng(13)
    data = (np.arange(ROWS * COLS, dtype="<i4").reshape(ROWS, COLS) % 97) * 1000
    data[64:80] = rng.integers(-(2**31), 2**31 - 1, size=(16, COLS), dtype="<i4")
    return data


# dataset -> (h5py keywords, chunks, codec ids the index names, needs refindex's own codec)
FILTERS: dict[str, tuple[dict[str, Any], tuple, set[str], bool]] = {
    "gzip": (dict(compression="gzip", compression_opts=6), (16, 10), {"zlib"}, False),
    "shuffle_gzip_fletcher32": (dict(shuffle=True, compression="gzip", fletcher32=True), (16, 10),
                                {"shuffle", "zlib", "fletcher32"}, False),
    "lzf": (dict(compression="lzf"), (16, 10), {"imagecodecs_lzf"}, False),
    "lz4": (dict(**hdf5plugin.LZ4()), (16, 10), {"imagecodecs_lz4h5"}, False),
    "lz4_small_blocks": (dict(**hdf5plugin.LZ4(nbytes=64)), (16, 10), {"imagecodecs_lz4h5"}, False),
    "zstd": (dict(**hdf5plugin.Zstd()), (16, 10), {"zstd"}, False),
    "bzip2": (dict(**hdf5plugin.BZip2()), (16, 10), {"bz2"}, False),
    "blosc_lz4": (dict(**hdf5plugin.Blosc(cname="lz4")), (16, 10), {"blosc"}, False),
    "blosc_zstd_bitshuffle": (dict(**hdf5plugin.Blosc(cname="zstd", shuffle=hdf5plugin.Blosc.BITSHUFFLE)),
                              (16, 10), {"blosc"}, False),
    "bitshuffle_none": (dict(**hdf5plugin.Bitshuffle(cname="none")), (16, 10),
                        {"imagecodecs_bitshuffle", "astype"}, False),
    "blosc2_2d": (dict(**hdf5plugin.Blosc2(cname="zstd")), (16, 10), {"imagecodecs_b2nd"}, False),
    "bitshuffle_lz4": (dict(**hdf5plugin.Bitshuffle(cname="lz4")), (16, 10), {"refindex_h5bitshuffle"}, True),
    "bitshuffle_zstd": (dict(**hdf5plugin.Bitshuffle(cname="zstd")), (16, 10), {"refindex_h5bitshuffle"}, True),
}


@pytest.fixture(scope="module")
def stock() -> StockReader:
    with StockReader() as reader:
        yield reader


def _zarray(refs: dict, name: str) -> dict:
    return json.loads(refs["refs"][f"{name}/.zarray"])


def _ids(z: dict) -> set[str]:
    return {c["id"] for c in [z["compressor"]] + list(z["filters"] or []) if c}


@pytest.fixture(scope="module")
def filters_file(tmp_path_factory) -> Path:
    h5 = tmp_path_factory.mktemp("filters") / "filters.h5"
    data = filter_data()
    with h5py.File(h5, "w") as f:
        for name, (kw, chunks, _, _) in FILTERS.items():
            f.create_dataset(name, data=data, chunks=chunks, **kw)
        f.create_dataset("lzf_beyond_8x", data=np.zeros((ROWS, COLS), "<i4"), chunks=(16, 10), compression="lzf")
        f.create_dataset("blosc2_1d", data=data.reshape(-1), chunks=(160,), **hdf5plugin.Blosc2())
        if h5py.h5z.filter_avail(h5py.h5z.FILTER_SZIP):
            try:
                f.create_dataset("szip", data=data, chunks=(16, 10), compression="szip")
                f.create_dataset("szip_ec_shuffle", data=data, chunks=(16, 10), shuffle=True,
                                 compression="szip", compression_opts=("ec", 16))
            except (ValueError, OSError):  # libhdf5 built without the szip encoder
                pass
    return h5


def test_each_filter_reads_exact_through_its_stock_codec(filters_file: Path, stock: StockReader,
                                                         tmp_path: Path) -> None:
    index = tmp_path / "filters.json"
    refindex.scan_to_file(filters_file, index, inline_threshold=0, inline_dataset_threshold=0)
    refs = json.loads(index.read_text())
    results = stock_verify(stock, filters_file, index)
    with h5py.File(filters_file) as f:
        names = list(f)
        masked = {n for n in names if f[n].chunks and any(
            f[n].id.get_chunk_info(i).filter_mask for i in range(f[n].id.get_num_chunks()))}
    assert {"lzf", "lz4", "blosc_lz4"} & masked, "the random rows should make optional filters skip chunks"
    for name, (_, _, ids, own) in FILTERS.items():
        z = _zarray(refs, name)
        assert _ids(z) == ids, (name, z)
        chunks = [k for k, v in refs["refs"].items() if k.startswith(f"{name}/") and isinstance(v, list)]
        assert chunks, f"{name}: no chunk referenced"
        if own:
            assert "UnknownCodecError" in results[name] and next(iter(ids)) in results[name], results[name]
        else:
            assert results[name] == "exact", (name, results[name])
    for name in ("szip", "szip_ec_shuffle"):
        if name in names:
            assert "imagecodecs_szip" in _ids(_zarray(refs, name))
            assert results[name] == "exact", results[name]
    # LZF squeezed beyond 8x: the stock decoder cannot size its output; refindex's codec can
    assert _zarray(refs, "lzf_beyond_8x")["compressor"] == {"id": "refindex_h5lzf", "size": 16 * 10 * 4}
    assert "UnknownCodecError" in results["lzf_beyond_8x"]
    # 1-D blosc2 chunks are frames no stock codec reads: values copied in
    assert _ids(_zarray(refs, "blosc2_1d")) == {"zlib"} and results["blosc2_1d"] == "exact"
    assert set(refs["refindex"]["codecs"]) == set().union(*(_ids(_zarray(refs, n)) for n in names))


def test_portable_index_needs_only_stock_codecs(filters_file: Path, stock: StockReader, tmp_path: Path) -> None:
    index = tmp_path / "filters.json"
    refindex.scan_to_file(filters_file, index, portable=True, inline_threshold=0, inline_dataset_threshold=0)
    refs = json.loads(index.read_text())
    assert not [c for c in refs["refindex"]["codecs"] if c.startswith("refindex_")], refs["refindex"]["codecs"]
    stock.ask("open", str(index), True)  # consolidated metadata: every array parses
    results = stock_verify(stock, filters_file, index)
    assert set(results.values()) == {"exact"}, results
    for name in ("bitshuffle_lz4", "bitshuffle_zstd", "lzf_beyond_8x"):
        assert "refindex_inlined" in notes(refs, name)
    assert _ids(_zarray(refs, "lz4")) == {"imagecodecs_lz4h5"}  # stock codecs stay references


def test_portable_fails_beyond_inline_max(filters_file: Path) -> None:
    with pytest.raises(refindex.RefindexError, match="bitshuffle_lz4") as err:
        refindex.scan(filters_file, portable=True, inline_max=1000)
    assert "inline limit" in str(err.value) and str(filters_file) in str(err.value)
    refs = refindex.scan(filters_file, portable=True, inline_max=1000, on_unsupported="skip")
    skipped = {s["path"] for s in refs["refindex"]["skipped"]}
    assert {"/bitshuffle_lz4", "/bitshuffle_zstd", "/lzf_beyond_8x"} <= skipped


# ---------------------------------------------------------------------- types and strings
@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("zoo") / "zoo.h5"
    write_portability_zoo(path)
    return path


@pytest.mark.parametrize("inline", [0, 16 << 10], ids=["referenced", "copied-in"])
def test_zoo_opens_in_stock_zarr_and_equals_h5py(zoo: Path, stock: StockReader, tmp_path: Path, inline: int) -> None:
    index = tmp_path / "zoo.json"
    refindex.scan_to_file(zoo, index, inline_threshold=min(inline, 256), inline_dataset_threshold=inline)
    refs = json.loads(index.read_text())
    stock.ask("open", str(index), True)
    results = stock_verify(stock, zoo, index)
    assert set(results.values()) == {"exact"}, results
    assert not [c for c in refs["refindex"]["codecs"] if c.startswith("refindex_")]
    # raw bytes for the types zarr lacks, with the numpy type to view them as and the HDF5 type named
    for name, view in (("ld_le", "<f16"), ("ld_be", ">f16"), ("c256_le", "<c32"), ("c256_be", ">c32")):
        z, attrs = _zarray(refs, f"long_doubles/{name}"), notes(refs, f"long_doubles/{name}")
        assert z["dtype"] == f"|V{np.dtype(view).itemsize}" and attrs["refindex_view_dtype"] == view
        assert "80-bit precision" in attrs["refindex_hdf5_type"]
    # numbers numpy has no layout for: h5py's converted values
    assert _zarray(refs, "odd_numbers/bfloat16")["dtype"] == "<f4"
    assert "refindex_inlined" in notes(refs, "odd_numbers/i31")
    # clean strings are plain |S references with no filter; dirty ones copied in as h5py reads them
    for name in ("clean", "nullpad"):
        z = _zarray(refs, f"strings/{name}")
        assert z["dtype"] == "|S8" and not z["filters"]
    for name in ("garbage", "space", "record"):
        assert "fixed-length strings" in notes(refs, f"strings/{name}")["refindex_inlined"]


def test_zoo_values_as_a_reader_sees_them(zoo: Path, tmp_path: Path) -> None:
    """The documented raw-bytes view gives the numbers; dirty strings read as libhdf5 returns them."""
    refs = refindex.scan(zoo, inline_dataset_threshold=0)
    root = refindex.open(refs)
    for tag in ("le", "be"):
        a = root[f"long_doubles/ld_{tag}"]
        got = a[...].view(notes(refs, f"long_doubles/ld_{tag}")["refindex_view_dtype"])
        assert np.array_equal(got, LONG_VALUES, equal_nan=True)
        assert np.array_equal(np.signbit(got), np.signbit(LONG_VALUES))
    with h5py.File(zoo) as f:
        assert np.array_equal(root["odd_numbers/bfloat16"][...], f["odd_numbers/bfloat16"][...])
        assert root["odd_numbers/i31"][...].tolist() == [-5, -1, 0, 1, 2**29, -(2**29)]
        assert root["strings/garbage"][...].tolist() == [b"ab", b"", b"abcdefgh"]
        assert root["strings/space"][...].tolist() == f["strings/space"][...].tolist() == [b"ab", b"a b  ", b"abcdefgh"]
        assert root["strings/clean"][...].tolist() == [s.rstrip(b"\0") for s in STRINGS["clean"][1]]
        # a never-written chunk of datetimes reads as libhdf5's fill (zero), not NaT
        assert root["datetimes/datetimes"][...].astype("i8").tolist() == f["datetimes/datetimes"][...].view("i8").tolist()


def test_large_dirty_strings_keep_the_codec_unless_portable(tmp_path: Path, stock: StockReader) -> None:
    h5 = tmp_path / "dirty.h5"
    write_large_dirty_strings(h5)
    refs = refindex.scan(h5)
    assert [f["id"] for f in _zarray(refs, "strings")["filters"]] == ["refindex_h5strpad"]
    assert refs["refindex"]["codecs"] == ["refindex_h5strpad", "zlib"]
    index = tmp_path / "dirty.json"
    refindex.scan_to_file(h5, index, portable=True)
    doc = json.loads(index.read_text())
    assert doc["refindex"]["codecs"] == ["zlib"]
    assert set(stock_verify(stock, h5, index).values()) == {"exact"}


def test_zarr_refusal_fails_naming_the_dataset_or_is_skipped(zoo: Path) -> None:
    """The reader's check runs on every array: a document zarr refuses never reaches an index."""
    from refindex.options import ScanOptions
    from refindex.pipeline import check_readable, scan_tree

    tree = scan_tree(zoo, ScanOptions())
    tree.arrays["/strings/clean"].dtype = "<f16"  # what an index would hold if a type slipped through
    with pytest.raises(refindex.RefindexError, match="zarr cannot open") as err:
        check_readable(tree, ScanOptions(), str(zoo))
    assert err.value.path == "/strings/clean" and str(zoo) in str(err.value)
    check_readable(tree, ScanOptions(on_unsupported="skip"), str(zoo))
    assert "/strings/clean" not in tree.arrays
    assert tree.skipped[-1]["path"] == "/strings/clean" and "No Zarr data type" in tree.skipped[-1]["reason"]


# ---------------------------------------------------------------------- what a reader needs
def test_info_names_each_codec_and_its_package(filters_file: Path, tmp_path: Path) -> None:
    index = tmp_path / "f.json"
    refindex.scan_to_file(filters_file, index, inline_threshold=0)
    out = subprocess.run([sys.executable, "-c", "import sys; from refindex.cli import main; sys.exit(main())",
                          "info", str(index)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert printed["codecs"]["imagecodecs_lz4h5"] == "imagecodecs" and printed["codecs"]["zlib"] == "numcodecs"
    assert printed["codecs"]["refindex_h5bitshuffle"] == "refindex"
    assert "refindex_h5bitshuffle" in out.stderr and "--portable" in out.stderr
    info = refindex.info(str(index))
    assert info["codecs"]["imagecodecs_lz4h5"] == "imagecodecs"
    assert info["needs_refindex"] == ["refindex_h5bitshuffle", "refindex_h5lzf"]


# ---------------------------------------------------------------------- files as a user expects
def test_new_index_files_follow_the_umask(filters_file: Path, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        refindex.scan_to_file(filters_file, tmp_path / "a.json")
        refindex.scan_to_file(filters_file, tmp_path / "p.parquet", format="parquet")
        refs = refindex.scan(filters_file)
        from refindex.formats import write_json

        write_json(refs, tmp_path / "b.json")
        report = refindex.run_batch([str(filters_file)], output=str(tmp_path / "batch"), workers=0, progress=False)
        assert not report.failed
    finally:
        os.umask(old)
    made = list((tmp_path / "batch").rglob("*"))
    assert any(p.name.endswith(".jsonl") for p in made) and any(p.name.endswith(".json") for p in made)
    for p in [tmp_path / "a.json", tmp_path / "b.json", *(tmp_path / "p.parquet").rglob("*"), *made]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o755 if p.is_dir() else 0o644), (p, oct(mode))
    assert stat.S_IMODE((tmp_path / "p.parquet").stat().st_mode) == 0o755
