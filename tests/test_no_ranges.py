"""A server without Range support (``python -m http.server``, many lab and university servers).

It sends the whole file for every range.  Every road over an index of such a file must read what
h5py reads on the file (each range cut from the whole answer, up to the documented size), or fail,
above that size, with the message the scan gives, naming Range support.  The scan warns that such an
index reads only through refindex (stock fsspec + zarr get the whole file for each chunk) and records
it in the index's provenance.
"""

from __future__ import annotations

import json
import warnings
from datetime import datetime, timezone
from pathlib import Path

import fsspec
import h5py
import numpy as np
import pytest
import zarr

import refindex
import refindex.source._failures
import webserver
from conftest import assert_same_values, dataset_names, zvalues
from h5compare import assert_same_h5
from refindex.errors import RefindexWarning, SourceError

RNG = np.random.default_rng(45)
NO_RANGES = "the server does not support range requests"


def _plain(path: Path) -> Path:
    """Chunks that lie beyond the metadata an index carries: the roads fetch them by range."""
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "no ranges"
        f.create_dataset("chunked", data=RNG.integers(0, 1 << 30, (400, 300)).astype("<i4"), chunks=(50, 100),
                         compression="gzip")
        f.create_dataset("contiguous", data=RNG.standard_normal(40_000))
        f.create_dataset("names", data=["alpha", "béta", ""], dtype=h5py.string_dtype())
        f.create_group("g").create_dataset("small", data=np.arange(7, dtype="<u2"))
    return path


def _nwb(path: Path) -> Path:
    pynwb = pytest.importorskip("pynwb")
    from hdmf.backends.hdf5 import H5DataIO

    nwb = pynwb.NWBFile(session_description="no ranges", identifier="no-ranges-1",
                        session_start_time=datetime(2026, 12, 7, tzinfo=timezone.utc))
    data = H5DataIO(RNG.integers(-100, 100, (20_000, 8)).astype("<i2"), chunks=(2_000, 8), compression="gzip")
    nwb.add_acquisition(pynwb.TimeSeries(name="raw", data=data, unit="V", rate=30_000.0))
    nwb.add_acquisition(pynwb.TimeSeries(name="speed", data=RNG.standard_normal(5_000), unit="m/s", rate=100.0))
    with pynwb.NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)
    return path


def _indexed(server: webserver.Server, path: Path, folder: Path) -> tuple[dict, Path]:
    """The index of ``path`` served without Range support (the scan's warning checked), and its file."""
    url = server.put(path.name, path.read_bytes())
    with pytest.warns(RefindexWarning) as said:
        refs = refindex.scan(url)
    told = [str(w.message) for w in said if issubclass(w.category, RefindexWarning)]
    assert told == [f"{url}: the server ignores range requests (it sends the whole file for a part of it), so this "
                    "index reads only through refindex (refindex.open, h5py_file, open_nwb), which cuts each chunk "
                    "out of the whole answer; other readers of it (fsspec and zarr without refindex) get the whole "
                    "file for each chunk and fail (\"Error -3 while decompressing data: incorrect header check\"). "
                    "The index records it (source.range_requests: false). To share the index, serve the file from "
                    "a server that supports range requests (nginx, Apache, S3 and most object stores do) and scan "
                    "it there"]
    assert refs["refindex"]["source"]["range_requests"] is False
    index = folder / f"{path.name}.refs.json"
    index.write_text(json.dumps(refs))
    return refs, index


def test_every_road_reads_a_file_from_a_server_without_ranges(tmp_path):
    """Before: refindex.open read, h5py_file and open_nwb failed on their first chunk with
    'short read at 12224: got 408714 of 6508 bytes'."""
    path = _plain(tmp_path / "plain.h5")
    with webserver.serve(ranges=False) as server:
        refs, index = _indexed(server, path, tmp_path)
        group = refindex.open(str(index))
        with h5py.File(path) as want:
            for name in dataset_names(want):
                assert_same_values(want[name][()], zvalues(group[name]))
            for opened in (refindex.h5py_file(str(index)), refindex.h5py_file(refs)):
                try:
                    assert assert_same_h5(want, opened) == 5
                    assert opened.refindex_file.stats.fetch.requests > 0  # chunks came from the server
                finally:
                    opened.close()
        fs = fsspec.filesystem("reference", fo=str(index), asynchronous=True, remote_options={"asynchronous": True})
        stock = zarr.open_array(zarr.storage.FsspecStore(fs, read_only=True, path="chunked"), mode="r")
        with pytest.raises(Exception, match="incorrect header check"):  # fsspec + zarr alone: what the warning tells
            stock[:50, :100]
        # an index made before the scan recorded it: the road learns it from the first whole answer
        del refs["refindex"]["source"]["range_requests"]
        with h5py.File(path) as want, refindex.h5py_file(refs) as opened:
            assert assert_same_h5(want, opened) == 5


def test_a_file_opened_by_its_url_from_a_server_without_ranges(tmp_path):
    """h5py_file(URL) on the fly: the file's bytes served as h5py reads them, and the index made beside
    for the cache records that its server ignores ranges."""
    from refindex.read.h5py_road import _beside

    path = _plain(tmp_path / "plain.h5")
    cache = tmp_path / "cache"
    with webserver.serve(ranges=False) as server:
        url = server.put(path.name, path.read_bytes())
        with h5py.File(path) as want:
            for _ in range(2):  # made on the fly, then from the cache
                with refindex.h5py_file(url, cache=cache) as opened:
                    assert assert_same_h5(want, opened) == 5
                _beside.wait_for_indexes(60)
                [entry] = cache.glob("*.refs.json")
                assert json.loads(entry.read_text())["refindex"]["source"]["range_requests"] is False


def test_a_server_with_ranges_is_told_by_its_answers(tmp_path):
    """No warning, nothing recorded, and no request more than a scan makes, from a server that
    supports ranges: also for a small file that its scan's first requests fetch whole."""
    small = tmp_path / "small.h5"
    with h5py.File(small, "w") as f:
        f.create_dataset("x", data=np.arange(1000, dtype="<i8"))
    for path in (small, _plain(tmp_path / "plain.h5")):
        with webserver.serve() as server:
            url = server.put(path.name, path.read_bytes())
            with warnings.catch_warnings():
                warnings.simplefilter("error", RefindexWarning)
                refs = refindex.scan(url)
            assert "range_requests" not in refs["refindex"]["source"]
            if path is small:
                assert sorted(server.requests, key=str) == [("GET", "/small.h5", "bytes=-1114112"),
                                                            ("GET", "/small.h5", "bytes=0-1048575"),
                                                            ("HEAD", "/small.h5", None)]


def test_open_nwb_reads_a_file_from_a_server_without_ranges(tmp_path):
    """Before: 'SourceError: http://127.0.0.1:8765/session.nwb: short read at 12224: got 408714 of 6508 bytes'."""
    import nwbcompare
    import pynwb

    path = _nwb(tmp_path / "session.nwb")
    with webserver.serve(ranges=False) as server:
        _, index = _indexed(server, path, tmp_path)
        with pynwb.NWBHDF5IO(str(path), "r") as io:
            want = io.read()
            for reader in ("h5py", "zarr"):
                got = refindex.open_nwb(str(index), reader=reader)
                try:
                    assert nwbcompare.assert_same_nwb(want, got) > 5
                    np.testing.assert_array_equal(got.acquisition["raw"].data[:], want.acquisition["raw"].data[:])
                finally:
                    got.refindex_io.close()


def test_a_file_above_the_size_limit_fails_naming_range_support(tmp_path, monkeypatch):
    """Every road refuses a file too large to be read whole, with the scan's message (Range support named)."""
    path = _plain(tmp_path / "plain.h5")
    size = path.stat().st_size
    with webserver.serve(ranges=False) as server:
        refs, index = _indexed(server, path, tmp_path)
        monkeypatch.setattr(refindex.source._failures, "WHOLE_FILE_FALLBACK", size // 4)
        said = []
        for read in (lambda: refindex.open(str(index))["chunked"][:],
                     lambda: refindex.h5py_file(str(index))["chunked"][:],
                     lambda: refindex.h5py_file(str(index))["contiguous"][:]):
            with pytest.raises(SourceError) as e:
                read()
            said.append(str(e.value))
    for message in said:
        assert message.startswith(f"{server.url('plain.h5')}: {NO_RANGES} (asked for bytes "), message
        assert message.endswith(f", it sent {size} bytes): refindex reads remote files in ranges; files over "
                                f"{(size // 4) >> 20} MiB need a server that supports them (nginx, Apache, S3 and "
                                "most object stores do), or copy the file here and index the copy"), message
