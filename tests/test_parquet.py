"""Parquet references (fsspec's LazyReferenceMapper layout) written by refindex.parquet.

The parquet index must serve exactly what the JSON index serves, key by key, through
fsspec's own reference filesystem; zarr must read h5py's values through it; and a
file with a million chunks must be written with bounded memory.
"""

from __future__ import annotations

import base64
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import fsspec
import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest
import zarr

import refindex
from refindex.testing import one_byte_chunks_values, write_one_byte_chunks
from refindex.cli import main as cli_main
from refindex.errors import RefindexError

from conftest import assert_same_values, dataset_names, zvalues

RNG = np.random.default_rng(11)


def _build(path: Path) -> None:
    """Chunked, contiguous, inline, vlen, sparse, scalar and NWB-ish nested groups."""
    with h5py.File(path, "w") as f:
        f.attrs["namespace"] = "core"
        f.create_dataset("chunked", data=RNG.integers(-500, 500, (120, 90)).astype("<i2"), chunks=(16, 32),
                         compression="gzip", shuffle=True)
        f.create_dataset("contiguous", data=RNG.standard_normal((4000,)))  # split into virtual chunks
        f.create_dataset("tiny", data=np.arange(6, dtype="<u1"))  # inline
        f.create_dataset("scalar", data=2.5)
        f.create_dataset("strings", data=["x", "yy", "", "zzz" * 40], dtype=h5py.string_dtype())
        f.create_dataset("empty", shape=(0,), dtype="<f4")
        s = f.create_dataset("sparse", shape=(60, 60), chunks=(10, 10), dtype="<i4", fillvalue=-3)
        s[20:30, 40:50] = 9
        s[55:60, 0:5] = 4
        acq = f.create_group("acquisition/ElectricalSeries")
        acq.attrs["neurodata_type"] = "ElectricalSeries"
        acq.attrs["nan_attr"] = np.nan
        acq.create_dataset("data", data=RNG.integers(0, 2**15, (300, 8)).astype("<i2"), chunks=(64, 8),
                           compression="gzip")
        acq.create_dataset("timestamps", data=np.linspace(0, 1, 300))
        f.create_group("general/devices/probe").attrs["description"] = "a probe"
        f.create_dataset("processing/module.v2/odd name", data=np.arange(30, dtype="<f4").reshape(5, 6),
                         chunks=(2, 3))
        f.create_group("empty_group")


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    d = tmp_path_factory.mktemp("parq")
    src = d / "mixed.h5"
    _build(src)
    kw = dict(contiguous_chunk_bytes=4096)
    refs = json.loads(json.dumps(refindex.scan(str(src), **kw)))
    out = d / "mixed.parq"
    summary = refindex.scan_to_parquet(str(src), str(out), record_size=7, **kw)  # small records: many files
    return src, refs, out, summary


def _fs(out, asynchronous=False):
    return fsspec.filesystem("reference", fo=str(out), remote_protocol="file", asynchronous=asynchronous)


def _expected_bytes(refs: dict, value) -> bytes:
    if isinstance(value, list):
        url = value[0].replace("{{u}}", refs["templates"]["u"])
        with open(url, "rb") as fh:
            fh.seek(value[1])
            return fh.read(value[2])
    if value.startswith("base64:"):
        return base64.standard_b64decode(value[7:])
    return value.encode()


def test_every_key_equal_to_json(indexed):
    src, refs, out, summary = indexed
    fs = _fs(out)
    chunk_keys = 0
    for key, value in refs["refs"].items():
        got = fs.cat_file(key)
        base = key.rsplit("/", 1)[-1]
        if key == ".zmetadata":
            assert json.loads(got)["metadata"] == json.loads(value)["metadata"]
        elif base.startswith(".z"):
            assert json.loads(got) == json.loads(value), key
        else:
            assert got == _expected_bytes(refs, value), key
            chunk_keys += 1
    assert chunk_keys == summary["chunks_referenced"] + summary["inline_chunks"]
    # ... and no chunk key the JSON index lacks: every grid position of every array.
    lazy = fs.references
    for key, value in refs["refs"].items():
        if key.endswith("/.zarray"):
            meta = json.loads(value)
            field = key[: -len("/.zarray")]
            grid = [math.ceil(s / c) for s, c in zip(meta["shape"], meta["chunks"])]
            for idx in np.ndindex(*grid) if grid else [()]:
                ck = field + "/" + (".".join(map(str, idx)) if idx else "0")
                assert (ck in lazy) == (ck in refs["refs"]), ck


def _assert_all_values(g: zarr.Group, src: Path) -> int:
    n = 0
    with h5py.File(src, "r") as f:
        for name in dataset_names(f):  # names first, zarr reads after: never zarr inside visititems
            obj = f[name]
            h = obj.asstr()[()] if h5py.check_string_dtype(obj.dtype) else obj[()]
            h = np.asarray(h, dtype=object) if obj.dtype.kind == "O" else np.asarray(h)
            assert_same_values(h, zvalues(g[name]))
            n += 1
    return n


def test_zarr_reads_parquet_refs(indexed):
    src, refs, out, _ = indexed
    store = zarr.storage.FsspecStore(_fs(out, asynchronous=True), read_only=True, path="")
    g = zarr.open_group(store, mode="r", zarr_format=2)
    assert _assert_all_values(g, src) == 10
    assert g["acquisition/ElectricalSeries"].attrs["neurodata_type"] == "ElectricalSeries"
    assert np.isnan(g["acquisition/ElectricalSeries"].attrs["nan_attr"])
    assert int(g["sparse"][0, 0]) == -3  # unwritten chunk: HDF5's fill value
    # refindex's own reader opens the folder too
    assert _assert_all_values(refindex.open(str(out)), src) == 10


def test_metadata_document(indexed):
    src, refs, out, _ = indexed
    doc = json.loads((out / ".zmetadata").read_text())
    assert doc["record_size"] == 7
    assert doc["zarr_consolidated_format"] == 1
    assert doc["refindex"]["templates"] == refs["templates"]
    assert doc["refindex"]["source"]["url"] == str(src)
    # records: full length except the last of each array
    rows = pq.read_metadata(out / "chunked" / "refs.0.parq").num_rows
    assert rows == 7
    grid = math.ceil(120 / 16) * math.ceil(90 / 32)
    last = pq.read_metadata(out / "chunked" / f"refs.{(grid - 1) // 7}.parq").num_rows
    assert last == grid - 7 * ((grid - 1) // 7)


def test_cli_format_parquet_and_atomic_replace(indexed, tmp_path, capsys):
    src, _, _, _ = indexed
    out = tmp_path / "cli.parq"
    assert cli_main(["scan", str(src), "--format", "parquet", "-o", str(out), "--stats"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert "scan_seconds" in stats
    assert (out / ".zmetadata").is_file() and (out / "chunked" / "refs.0.parq").is_file()
    # re-writing replaces the old index in place
    (out / "stale-marker").write_text("x")
    refindex.scan_to_parquet(str(src), str(out))
    assert not (out / "stale-marker").exists()
    with h5py.File(src) as f:
        np.testing.assert_array_equal(refindex.open(str(out))["chunked"][:], f["chunked"][()])
    # no temporary folders left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli.parq"]


def test_refuses_to_replace_other_folder_and_leaves_nothing_on_error(indexed, tmp_path):
    src, _, _, _ = indexed
    other = tmp_path / "mine"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    with pytest.raises(RefindexError):
        refindex.scan_to_parquet(str(src), str(other))
    assert (other / "precious.txt").read_text() == "keep me"
    bad = tmp_path / "not.h5"
    bad.write_bytes(b"not an hdf5 file" * 100)
    with pytest.raises(RefindexError):
        refindex.scan_to_parquet(str(bad), str(tmp_path / "bad.parq"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "not.h5"]


# ---------------------------------------------------------------- a million chunks
N_SIDE = 1000


def _million_chunk_file(path: Path) -> np.ndarray:
    """(1000, 1000) uint8 in (1, 1) chunks, allocated early and written in one go; returns the values."""
    write_one_byte_chunks(path, N_SIDE, N_SIDE, name="big")
    return one_byte_chunks_values(N_SIDE, N_SIDE)


def test_million_chunks_bounded_memory(tmp_path):
    src = tmp_path / "million.h5"
    values = _million_chunk_file(src)
    out = tmp_path / "million.parq"
    code = textwrap.dedent(f"""
        import json, resource, time, refindex
        t0 = time.perf_counter()
        s = refindex.scan_to_parquet({str(src)!r}, {str(out)!r}, inline_threshold=0, inline_dataset_threshold=0)
        s["seconds"] = round(time.perf_counter() - t0, 2)
        # VmHWM: this process's own peak (ru_maxrss may include the parent's memory before exec)
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")]
        kb = int(hwm[0].split()[1]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        s["peak_rss_mb"] = round(kb / 1024, 1)
        print(json.dumps(s))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    n = N_SIDE * N_SIDE
    print(f"\nparquet, {n} chunks: {summary['seconds']} s, peak RSS {summary['peak_rss_mb']} MB, "
          f"{summary['bytes']} bytes ({summary['bytes'] / n:.2f} bytes/chunk), {summary['records']} files")
    assert summary["chunks_referenced"] == n
    # ~290 MB measured, nearly all of it the scan itself; a dict of a million keys would be twice that
    assert summary["peak_rss_mb"] < 1024
    # rows and stored references counted in the files themselves
    files = sorted((out / "big").glob("refs.*.parq"))
    assert len(files) == summary["records"]
    rows = stored = 0
    for p in files:
        t = pq.read_table(p, columns=["path"])
        rows += t.num_rows
        stored += t.num_rows - t.column("path").null_count
    assert rows == stored == n
    # a sample of chunks read through fsspec's reference filesystem, and a block through zarr
    fs = _fs(out)
    for i, j in RNG.integers(0, N_SIDE, (300, 2)).tolist():
        assert fs.cat_file(f"big/{i}.{j}") == bytes([values[i, j]])
    g = zarr.open_group(zarr.storage.FsspecStore(_fs(out, asynchronous=True), read_only=True, path=""),
                        mode="r", zarr_format=2)
    np.testing.assert_array_equal(g["big"][997:, :], values[997:, :])
