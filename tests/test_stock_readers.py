"""Indexes read by a reader without refindex: zarr + fsspec + numcodecs + imagecodecs only.

Every corpus file is indexed here, then opened and read in a separate interpreter that
cannot import refindex (tests/stockenv.py), and each dataset's values, as that reader
decodes them, are compared with h5py's.  Exceptions are listed by name, each with the
codec no stock package has.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import refindex
from stockenv import StockError, StockGroup, StockReader

from corpus import CORPUS, chunk_samples, read_whole, sampled  # noqa: E402
MANIFEST = CORPUS / "MANIFEST.tsv"


def _corpus_files() -> list[str]:
    if not MANIFEST.exists():
        return []
    import csv

    with open(MANIFEST, newline="") as fh:
        return [r["relpath"] for r in csv.DictReader(fh, delimiter="\t") if not r["notes"].startswith("NOT HDF5")]


# Datasets whose stored bytes only a refindex codec decodes (file -> {dataset: codec}): the
# HDF5 bitshuffle filter's LZ4 framing (bitshuffle_datasets' element counts are not multiples
# of 8, and even where they are, imagecodecs' lz4h5 would take an LZ4 block exactly as long as
# its raw size for a raw block).  With portable=True each of them is copied in instead.
_BITSHUFFLE = "refindex_h5bitshuffle"
NEEDS_REFINDEX: dict[str, dict[str, str]] = {
    "kerchunk/hdf5_compression_bitshuffle.h5": {"/data": _BITSHUFFLE},
    "jhdf/bitshuffle_datasets.hdf5": {
        f"/{t}_bs{b}_comp2": _BITSHUFFLE for t in ("float32", "float64", "int16", "int8")
        for b in (0, 8, 64, 1024, 4096)},
}


@pytest.fixture(scope="session")  # one per test process: this module's tests are spread over the workers
def stock() -> StockReader:
    with StockReader() as reader:
        yield reader


def stock_report(reader: StockReader, path: str, index: str, only: set[str] | None = None) -> tuple[str, Any]:
    """(how the default group open went, verify's report on the values the stock reader decoded;
    ``only``: the arrays compared, the others reported "missing")."""
    try:
        reader.ask("open", index, True)
        opened = "ok"
    except StockError as e:
        opened = str(e)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = refindex.verify(path, index, group=StockGroup(reader, index, only=only))
    return opened, report


def sample_arrays(index: str) -> tuple[set[str], dict[str, dict]]:
    """Which arrays of ``index`` the stock reader reads whole, and the huge ones (path -> .zarray).

    test_corpus compares every value of every array through zarr already; what this module adds is
    whether zarr *without refindex* decodes them, which depends on each array's metadata (codecs,
    dtype, fill value), not on its size or number. So: one array of each kind of metadata, plus
    an evenly spaced sample (corpus.sampled); arrays too large to read whole (corpus.read_whole) are
    read in three chunks (corpus.chunk_samples)."""
    with open(index) as fh:
        refs = json.load(fh)["refs"]
    metas = {k[: -len("/.zarray")]: json.loads(v) for k, v in refs.items() if k.endswith("/.zarray")}
    if not metas and ".zarray" in refs:
        metas = {"": json.loads(refs[".zarray"])}

    def itemsize(m: dict) -> int:
        return np.dtype(m["dtype"] if isinstance(m["dtype"], str) else "V1").itemsize

    # huge or of very many chunks (jhdf's 10,000 one-element chunks per array), in chunks of at most
    # 64 MiB (one huge chunk is left to verify, which samples it): their codecs are the same in every chunk
    huge = {p: m for p, m in metas.items() if not read_whole(m["shape"], m["chunks"], itemsize(m))
            and math.prod(m["chunks"]) * itemsize(m) <= 64 << 20}
    kinds: dict[str, str] = {}
    for p, m in sorted(metas.items()):
        kind = json.dumps({k: v for k, v in m.items() if k not in ("shape", "chunks")}, sort_keys=True)
        kinds.setdefault(kind, p)
    keep = (set(kinds.values()) | set(sampled(list(metas)))) - set(huge)
    return keep, huge


def huge_differences(reader: StockReader, path: str, index: str, huge: dict[str, dict]) -> dict[str, str]:
    """The first, middle and last chunk of each huge array as the stock reader decodes them, against h5py."""
    bad = {}
    with h5py.File(path, "r") as f:
        for p, meta in huge.items():
            for sel in chunk_samples(meta["shape"], meta["chunks"]):
                try:
                    got = reader.ask("read", index, p, sel)
                except StockError as e:
                    bad["/" + p] = f"unreadable: {e}"
                    break
                if not np.array_equal(got, f["/" + p][sel]):
                    bad["/" + p] = f"different: values differ in {sel}"
                    break
    return bad


def test_stock_reader_cannot_import_refindex(stock: StockReader) -> None:
    assert not stock.can_import("refindex")
    assert not stock.can_import("kerchunk")
    assert stock.can_import("imagecodecs")


@pytest.mark.skipif(not MANIFEST.exists(), reason=f"HDF5 corpus not found at {CORPUS}")
@pytest.mark.parametrize("rel", _corpus_files())
def test_corpus_index_reads_exactly_without_refindex(rel: str, stock: StockReader, tmp_path: Path) -> None:
    path = str(CORPUS / rel)
    index = str(tmp_path / "index.json")
    refindex.scan_to_file(path, index, on_unsupported="skip")
    keep, huge = sample_arrays(index)
    opened, report = stock_report(stock, path, index, only=keep)
    needs = NEEDS_REFINDEX.get(rel, {})
    if not needs:
        assert opened == "ok", f"zarr.open_group fails without refindex: {opened}"
    left_out = {r.path for r in report.results if r.status == "missing" and r.path.strip("/") not in keep}
    # (an array of the sample reported missing stays a finding: it is in ``bad``)
    bad = {r.path: f"{r.status}: {r.detail}" for r in report.results
           if r.status in ("different", "unreadable", "missing") and r.path not in left_out}
    bad |= huge_differences(stock, path, index, huge)
    assert set(bad) == set(needs), bad
    for p, codec in needs.items():
        assert codec in bad[p], (p, bad[p])
    with open(index) as fh:
        listed = json.load(fh)["refindex"]["codecs"]
    assert (_BITSHUFFLE in listed) == bool(needs)
    assert not [c for c in listed if c.startswith("refindex_") and c != _BITSHUFFLE]


@pytest.mark.skipif(not MANIFEST.exists(), reason=f"HDF5 corpus not found at {CORPUS}")
@pytest.mark.parametrize("rel", sorted(NEEDS_REFINDEX))
def test_portable_index_needs_no_refindex_codec(rel: str, stock: StockReader, tmp_path: Path) -> None:
    path = str(CORPUS / rel)
    index = str(tmp_path / "index.json")
    refindex.scan_to_file(path, index, portable=True)
    opened, report = stock_report(stock, path, index)
    assert opened == "ok"
    assert report.ok, report.summary()
    assert report.count("exact") >= len(NEEDS_REFINDEX[rel])
    with open(index) as fh:
        doc = json.load(fh)
    assert not [c for c in doc["refindex"]["codecs"] if c.startswith("refindex_")]
    assert doc["refindex"]["options"]["portable"] is True


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_null_dataspace_reads_as_nothing_without_refindex(zarr_format: int, stock: StockReader,
                                                          tmp_path: Path) -> None:
    """A dataset without a dataspace (h5py reads ``Empty``: no element) gives no value to any reader.

    Before (issue 45): a 0-d array with no chunk, which zarr read as ``0`` (``""`` for text) and
    xarray showed as ``array(0, dtype=int32)``.  Now an empty array of shape (0,) on its own
    dimension (``null_dataspace``), which cannot conflict with the phony dimensions netCDF's rules
    give the other datasets of the group; the h5py road still reads ``Empty``."""
    path = tmp_path / "null.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("null_i4", data=h5py.Empty("<i4"))  # first: the scan would number it phony_dim_0
        f.create_dataset("x", data=np.arange(5, dtype="<i4"))
        f.create_dataset("null_f8", data=h5py.Empty("<f8"))
        f.create_dataset("null_text", data=h5py.Empty(h5py.string_dtype()))
        f.create_dataset("g/null_u2", data=h5py.Empty(">u2"))
        f.create_dataset("g/y", data=np.arange(3.0))
    index = str(tmp_path / "null.json")
    refindex.scan_to_file(path, index, zarr_format=zarr_format)
    nulls = {"null_i4": "<i4", "null_f8": "<f8", "null_text": None, "g/null_u2": ">u2"}
    for name, dtype in nulls.items():
        got = stock.ask("read", index, name, Ellipsis)
        assert got.shape == (0,), (name, got)
        if dtype is not None:
            assert got.dtype.newbyteorder("=") == np.dtype(dtype).newbyteorder("="), (name, got.dtype)
    report = refindex.verify(str(path), index, group=StockGroup(stock, index))
    assert report.ok and {r.path: r.status for r in report.results if r.path.lstrip("/") in nulls} == {
        "/" + n: "exact" for n in nulls}, report.summary()
    for group, names in (("", ["null_i4", "null_f8", "null_text"]), ("g", ["null_u2"])):
        shown = stock.ask("xarray", index, group)  # default decoding: opens, and shows no value
        for name in names:
            dims, values = shown[name]
            assert dims == ("null_dataspace",) and values.shape == (0,), (group, name, dims, values)
    assert stock.ask("xarray", index, "")["x"][1].tolist() == list(range(5))
    with refindex.h5py_file(index) as h:
        assert all(isinstance(h[n][()], h5py.Empty) for n in nulls)
        assert h["null_i4"][()] == h5py.Empty("<i4")
