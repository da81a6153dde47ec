"""Indexes read by a reader without refindex: zarr + fsspec + numcodecs + imagecodecs only.

Every corpus file is indexed here, then opened and read in a separate interpreter that
cannot import refindex (tests/stockenv.py), and each dataset's values, as that reader
decodes them, are compared with h5py's.  Exceptions are listed by name, each with the
codec no stock package has.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

import refindex
from stockenv import StockError, StockGroup, StockReader

from corpus import CORPUS  # noqa: E402
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


def stock_report(reader: StockReader, path: str, index: str) -> tuple[str, Any]:
    """(how the default group open went, verify's report on the values the stock reader decoded)."""
    try:
        reader.ask("open", index, True)
        opened = "ok"
    except StockError as e:
        opened = str(e)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = refindex.verify(path, index, group=StockGroup(reader, index))
    return opened, report


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
    opened, report = stock_report(stock, path, index)
    needs = NEEDS_REFINDEX.get(rel, {})
    if not needs:
        assert opened == "ok", f"zarr.open_group fails without refindex: {opened}"
    bad = {r.path: f"{r.status}: {r.detail}" for r in report.results
           if r.status in ("different", "unreadable", "missing")}
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
