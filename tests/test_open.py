"""The user's side of an index (issue #11): what is inline, what a reader fetches, opening files directly.

* Small data goes into the index: every dataset stored in fewer than ``inline_threshold``
  bytes, contiguous ones included, and whole datasets below ``inline_dataset_threshold``.
* ``refindex.open``/``open_nwb`` read metadata and inline values from memory and fetch
  referenced chunks in merged batches; the store counts what it fetched.
* The NWB reader serves scalars and re-read small arrays from memory: same values as zarr.
* ``open``/``open_nwb``/``info`` take an HDF5 file or URL (scanned on the fly, cached by
  URL + size + etag/mtime) and say what a file is when it is neither an index nor HDF5.
"""

from __future__ import annotations

import json
import warnings

import fsspec
import h5py
import numpy as np
import pytest
import zarr

import refindex
from refindex.read import ZarrTree, serve_from_memory

import nwbcompare  # noqa: E402
import nwbfiles  # noqa: E402
from conftest import assert_same_values, consumer_open, moto_s3, scan, zvalues
from waiting import until


def _inline(refs, key):
    value = refs["refs"][key]
    return isinstance(value, str) and value.startswith("base64:")


# ---------------------------------------------------------------- what goes inline


def _upload(s3: dict, path, key: str) -> None:
    """Put ``path`` at ``key`` ("bucket/name") of the moto server ``s3``, making the bucket."""
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3)
    fs.mkdir(key.split("/", 1)[0])
    fs.put(str(path), key)


def test_small_contiguous_datasets_are_inline(h5path):
    with h5py.File(h5path, "w") as f:
        f["scalar"] = 2.5  # contiguous, 8 bytes
        f["short"] = np.arange(10, dtype="i4")  # contiguous, 40 bytes
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        f.create_dataset("compact", data=np.arange(4, dtype="i2"), dcpl=dcpl)
        f["big"] = np.arange(50_000, dtype="f8")  # 400 kB: referenced
    refs = scan(h5path)
    assert _inline(refs, "scalar/0") and _inline(refs, "short/0") and _inline(refs, "compact/0")
    assert isinstance(refs["refs"]["big/0"], list)
    root = consumer_open(refs)
    with h5py.File(h5path, "r") as f:
        for name in ("scalar", "short", "compact", "big"):
            assert_same_values(f[name][()], zvalues(root[name]))


def test_inline_dataset_threshold_takes_whole_small_datasets(h5path):
    with h5py.File(h5path, "w") as f:
        f.create_dataset("ids", data=np.arange(1000, dtype="i8"), chunks=(100,))  # 8 kB in 10 chunks
        f.create_dataset("col", data=np.linspace(0, 1, 1500))  # 12 kB contiguous
        f.create_dataset("data", data=np.arange(10_000, dtype="f8"), chunks=(1000,))  # 80 kB
    refs = scan(h5path)
    assert all(_inline(refs, f"ids/{i}") for i in range(10)) and _inline(refs, "col/0")
    assert all(isinstance(refs["refs"][f"data/{i}"], list) for i in range(10))
    lean = scan(h5path, inline_dataset_threshold=0)
    assert isinstance(lean["refs"]["ids/0"], list) and isinstance(lean["refs"]["col/0"], list)
    summary = refindex.info(refs)
    assert summary["inline_options"] == {"inline_threshold": 256, "inline_dataset_threshold": 16384,
                                         "inline_max": 64 << 20}
    assert summary["inline_chunks"] == 11 and summary["chunks_referenced"] == 10
    root = consumer_open(refs)
    with h5py.File(h5path, "r") as f:
        for name in ("ids", "col", "data"):
            assert_same_values(f[name][()], zvalues(root[name]))


def test_remote_scan_reads_small_datasets_in_one_batch(tmp_path):
    """300 scalars beside 40 kB arrays: their bytes come in one more round trip, not one each."""
    path = tmp_path / "scalars.h5"
    with h5py.File(path, "w") as f:
        for i in range(300):
            g = f.create_group(f"s{i:03d}")
            g["data"] = np.full(5000, i, dtype="f8")
            g["start"] = float(i)
    with moto_s3() as s3:
        _upload(s3, path, "open-bucket/scalars.h5")
        lean: dict = {}
        refindex.scan("s3://open-bucket/scalars.h5", storage_options=s3, stats=lean, inline_threshold=0,
                      inline_dataset_threshold=0)
        stats: dict = {}
        refs = json.loads(json.dumps(refindex.scan("s3://open-bucket/scalars.h5", storage_options=s3, stats=stats)))
    assert all(_inline(refs, f"s{i:03d}/start/0") for i in range(300))
    assert stats["round_trips"] <= lean["round_trips"] + 1, (stats, lean)
    with h5py.File(path, "r") as f:
        root = consumer_open(json.loads(json.dumps(refindex.scan(str(path)))))
        assert [float(root[f"s{i:03d}/start"][()]) for i in range(300)] == [f[f"s{i:03d}/start"][()]
                                                                             for i in range(300)]


# ---------------------------------------------------------------- the store


def test_index_store_merges_neighbouring_chunks(h5path):
    data = np.arange(40_000, dtype="i8")
    with h5py.File(h5path, "w") as f:
        f.create_dataset("x", data=data, chunks=(4000,))  # 10 chunks of 32 kB, stored one after another
    root = refindex.open(scan(h5path), check_source=False)
    assert_same_values(data, root["x"][...])
    stats = root.store.stats
    assert stats.requests == 1 and len(stats.keys) == 10 and stats.bytes_fetched == data.nbytes
    assert_same_values(data[3999:4001], root["x"][3999:4001])  # two more chunks, again one request
    assert stats.requests == 2


def test_index_store_fetches_a_large_range_in_parts(h5path):
    data = np.arange(400_000, dtype="f8")  # 3.2 MB contiguous: one chunk
    with h5py.File(h5path, "w") as f:
        f["x"] = data
    root = refindex.open(scan(h5path), check_source=False)
    assert_same_values(data, root["x"][...])
    assert root.store.stats.requests == 7 and root.store.stats.keys == ["x/0"]  # 512 KiB parts


def test_a_window_of_many_chunks_is_fetched_in_one_round_trip_of_few_requests(h5path):
    """zarr asks for a selection's chunks key by key, 10 at a time by default: the store has zarr ask for
    them all at once, and fetches 600 chunks lying one after another as one span, cut in a few parts
    (issue 44: 2.9 s for 800 chunks, 200 requests, on a 30 ms store)."""
    import webserver

    data = (np.arange(1200 * 256 * 8) % 30011).astype("i2").reshape(-1, 8)
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("x", data.shape, "i2", chunks=(256, 8))  # 4 KiB chunks, written in order
        for i in range(0, len(data), 256):
            d[i:i + 256] = data[i:i + 256]
    with webserver.serve() as server:
        url = server.put("w.h5", h5path.read_bytes())
        root = refindex.open(scan(h5path, url=url), check_source=False)
        before = len(server.requests)
        assert_same_values(data[300 * 256:900 * 256], root["x"][300 * 256:900 * 256])
        gets = [r for r in server.requests[before:] if r[0] == "GET"]
    stats = root.store.stats
    import zarr

    # zarr handles a batch of chunks per task (its default, 1, made zarr's work per chunk most of the read)
    assert zarr.config.get("codec_pipeline.batch_size") >= 128
    needed = 600 * 256 * 8 * 2  # (libhdf5 put a few chunk index nodes between the chunks)
    assert stats.round_trips == 1 and len(stats.keys) == 600, stats.as_dict()
    assert stats.bytes_fetched <= 1.2 * needed, stats.as_dict()
    assert 1 < stats.requests <= 8 and len(gets) == stats.requests, stats.as_dict()  # 2.5 MB: in parts


def test_a_scan_in_steps_is_read_ahead_by_one_step(h5path):
    """``for i in ...: a[i:i + step]``: once two steps followed each other, each step's chunks come with the
    step before it (no round trip of its own); where the scan ends, one step at most was fetched unread."""
    data = (np.arange(256 * 100 * 8) % 3001).astype("i2").reshape(-1, 8)
    with h5py.File(h5path, "w") as f:
        d = f.create_dataset("x", data.shape, "i2", chunks=(256, 8))
        for i in range(0, len(data), 256):
            d[i:i + 256] = data[i:i + 256]
    root = refindex.open(scan(h5path), check_source=False)
    stats = root.store.stats
    assert_same_values(data[50 * 256:60 * 256], root["x"][50 * 256:60 * 256])  # one read: nothing guessed
    assert len(stats.keys) == 10
    trips = []
    for i in range(0, 40 * 256, 5 * 256):
        before = stats.round_trips
        assert_same_values(data[i:i + 5 * 256], root["x"][i:i + 5 * 256])
        trips.append(stats.round_trips - before)
    assert trips == [1, 1, 0, 0, 0, 0, 0, 0], trips
    # The step after the last was asked for with it (its fetch may still be landing: read it, no round trip).
    before = stats.round_trips
    assert_same_values(data[40 * 256:45 * 256], root["x"][40 * 256:45 * 256])
    assert stats.round_trips == before
    assert {f"x/{i}.0" for i in range(40, 45)} <= set(stats.keys)
    assert len(stats.keys) == len(set(stats.keys)) <= 10 + 45 + 5  # each chunk once, at most one step ahead


def test_index_store_reports_missing_source(h5path, tmp_path):
    with h5py.File(h5path, "w") as f:
        f["x"] = np.arange(100_000, dtype="f8")
    refs = scan(h5path)
    refs["templates"]["u"] = str(tmp_path / "gone.h5")
    root = refindex.open(refs, check_source=False)
    with pytest.raises(refindex.SourceError, match="gone.h5"):
        root["x"][:10]


@pytest.mark.parametrize("values", [np.arange(24, dtype="i4").reshape(4, 6),
                                    np.array(["a", "bb", "", "dddd", "e"], dtype=object),
                                    np.linspace(0, 1, 7)])
def test_memory_served_selections_equal_zarrs(values):
    """The NWB reader's in-memory selections return what zarr returns, type and shape included."""
    store = zarr.storage.MemoryStore()
    dtype = str if values.dtype == object else values.dtype
    plain = zarr.create_array(store, name="a", shape=values.shape, chunks=(2,) * values.ndim, dtype=dtype,
                              zarr_format=2)
    plain[...] = values
    fast = zarr.open_array(store, path="a", mode="r", zarr_format=2)
    serve_from_memory(fast, lambda: zarr.Array.get_basic_selection(fast, Ellipsis))
    n = values.shape[0]
    selections = [(), Ellipsis, 0, -1, slice(1, 3), slice(None, None, 2), slice(-3, None), [0, 2], [n - 1, 0]]
    if values.ndim == 1:
        selections.append(np.array([True] + [False] * (n - 1)))
    else:
        selections += [(1, 2), (slice(None), 3), (0, slice(1, 5)), (slice(1, 3), [0, 4]), (Ellipsis, 1)]
    for sel in selections:
        want, got = plain[sel], fast[sel]
        assert type(want) is type(got), sel
        assert np.asarray(want).dtype == np.asarray(got).dtype and np.shape(want) == np.shape(got), sel
        assert np.array_equal(np.asarray(want).astype(object), np.asarray(got).astype(object)), sel
    assert np.array_equal(plain.oindex[[0, 1]].astype(object), fast.oindex[[0, 1]].astype(object))
    got = fast[0:2]
    got[...] = values[-1]  # what a caller does with an array it was given must not reach the kept values
    assert np.array_equal(np.asarray(fast[0:2]).astype(object), np.asarray(plain[0:2]).astype(object))


def test_scalars_decoded_without_zarr_equal_zarrs(h5path):
    """The NWB reader decodes inline 0-d chunks itself: same type and value as zarr's ``a[()]``."""
    with h5py.File(h5path, "w") as f:
        f["f8"] = 2.5
        f["nan"] = np.nan
        f["be"] = np.array(7, dtype=">i4")
        f["b1"] = np.bool_(True)
        f["c16"] = np.complex128(1 - 2j)
        f["text"] = "héllo"
        f.create_dataset("fixed", data=np.bytes_(b"ab"), dtype="S5")
        f["rec"] = np.array((1, 2.0), dtype=[("a", "<i4"), ("b", "<f8")])
        f.create_dataset("enum", data=np.int8(1), dtype=h5py.enum_dtype({"a": 0, "b": 1}, basetype="i1"))
    refs = scan(h5path)
    tree = ZarrTree.of(refindex.read.store(refs))
    fast = tree.scalars()
    assert set(fast) == {"f8", "nan", "be", "b1", "c16", "text", "fixed", "rec", "enum"}
    for path, value in fast.items():
        want = zarr.Array.get_basic_selection(zarr.open_array(consumer_open(refs).store, path=path, mode="r",
                                                              zarr_format=2), ())
        assert type(value) is type(want), path
        assert value == want or (path == "nan" and np.isnan(value) and np.isnan(want)), path


# ---------------------------------------------------------------- NWB through the index


@pytest.fixture(scope="module")
def many_objects(tmp_path_factory):
    pytest.importorskip("pynwb")
    path = tmp_path_factory.mktemp("many") / "many.nwb"
    nwbfiles.build_many_objects(path)
    return path


def _hdf5_nwb(path):
    import pynwb

    io = pynwb.NWBHDF5IO(str(path), "r")
    return io, io.read()


def _cell(v):
    """A DataFrame cell as plain data: arrays as lists, NWB containers by type and name."""
    if hasattr(v, "object_id"):
        return (type(v).__name__, v.name)
    if isinstance(v, (np.ndarray, list)):
        return np.asarray(v).tolist()
    return v


def test_open_nwb_fetches_no_small_dataset(many_objects):
    """Opening the index reads nothing by reference: every scalar and table column is inline."""
    refs = scan(many_objects)
    nwb = refindex.open_nwb(refs, reader="zarr")
    store = nwb.refindex_io._file.store
    assert store.stats.keys == [] and store.stats.requests == 0
    hio, hnwb = _hdf5_nwb(many_objects)
    try:
        nwbcompare.assert_same_nwb(hnwb, nwb)
        for table in ("units", "electrodes", "trials"):
            a = getattr(hnwb, table).to_dataframe()
            b = getattr(nwb, table).to_dataframe()
            assert a.shape == b.shape and list(a.columns) == list(b.columns) and list(a.index) == list(b.index)
            for col in a.columns:
                assert [_cell(v) for v in a[col]] == [_cell(v) for v in b[col]], (table, col)
        # spike times are referenced: read once, whole, when the table reads them row by row
        assert set(store.stats.keys) <= {k for k in refs["refs"] if k.startswith("units/spike_times/")}
        assert store.stats.round_trips <= 2
    finally:
        hio.close()


def test_open_nwb_on_the_file_scans_once_and_caches(many_objects, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    hio, hnwb = _hdf5_nwb(many_objects)
    try:
        nwbcompare.assert_same_nwb(hnwb, refindex.open_nwb(str(many_objects), cache=cache))
        entries = list(cache.glob("*.refs.json"))
        assert len(entries) == 1
        calls = []
        real_scan = refindex.pipeline.scan_refs
        monkeypatch.setattr(refindex.pipeline, "scan_refs", lambda *a, **k: calls.append(a) or real_scan(*a, **k))
        nwbcompare.assert_same_nwb(hnwb, refindex.open_nwb(str(many_objects), cache=cache))
        assert calls == []  # the cached index, after one freshness check
    finally:
        hio.close()
    changed = tmp_path / "changed.nwb"
    changed.write_bytes(many_objects.read_bytes())
    refindex.open_nwb(str(changed), cache=cache)
    with h5py.File(changed, "r+") as f:  # the file changes: its entry is stale, scanned again and replaced
        f["general"].attrs["note"] = "changed"
    refindex.open_nwb(str(changed), cache=cache)
    entries = list(cache.glob("*.refs.json"))
    assert len(calls) == 2 and len(entries) == 2  # one entry per file
    assert sum('\\"note\\": \\"changed\\"' in e.read_text() for e in entries) == 1  # the new scan's


def test_an_index_cached_in_an_older_form_is_not_read_again(many_objects, tmp_path, monkeypatch):
    """A cache entry made before the form of indexes changed (refindex.options.INDEX_FORM) would be read as
    it was (an NWB file's zeros masked in xarray, say): the open scans anew into an entry of its own."""
    from refindex.options import INDEX_FORM
    from refindex.read.index import _names

    cache = tmp_path / "cache"
    monkeypatch.setattr(_names, "INDEX_FORM", INDEX_FORM - 1)
    refindex.open_nwb(str(many_objects), cache=cache)
    [old] = list(cache.glob("*.refs.json"))
    monkeypatch.undo()
    calls = []
    real_scan = refindex.pipeline.scan_refs
    monkeypatch.setattr(refindex.pipeline, "scan_refs", lambda *a, **k: calls.append(a) or real_scan(*a, **k))
    hio, hnwb = _hdf5_nwb(many_objects)
    try:
        nwbcompare.assert_same_nwb(hnwb, refindex.open_nwb(str(many_objects), cache=cache))
    finally:
        hio.close()
    assert len(calls) == 1 and {p.name for p in cache.glob("*.refs.json")} - {old.name}


def test_open_nwb_on_an_s3_url(many_objects, tmp_path):
    with moto_s3() as s3:
        _upload(s3, many_objects, "nwb-bucket/session.nwb")
        hio, hnwb = _hdf5_nwb(many_objects)
        try:
            nwb = refindex.open_nwb("s3://nwb-bucket/session.nwb", storage_options=s3, cache=tmp_path / "c",
                                    read_ahead=0, reader="zarr")
            assert nwb.refindex_io._file.store.stats.requests == 0  # the open fetched no chunk
            nwbcompare.assert_same_nwb(hnwb, nwb)
            ts = nwb.processing["module1"]["series003"]
            assert_same_values(hnwb.processing["module1"]["series003"].data[:], ts.data[:])
        finally:
            hio.close()


def test_open_nwb_reads_the_main_recording_ahead(tmp_path):
    """Remote: the first chunk of the longest acquisition series is fetched while the file opens
    (one request), and reading it then costs none; the values are h5py's."""
    pytest.importorskip("pynwb")
    path = tmp_path / "main.nwb"
    nwbfiles.build_main(path, tmp_path)
    with moto_s3() as s3:
        _upload(s3, path, "ahead-bucket/main.nwb")
        hio, hnwb = _hdf5_nwb(path)
        try:
            nwb = refindex.open_nwb("s3://ahead-bucket/main.nwb", storage_options=s3, cache=False, reader="zarr")
            store = nwb.refindex_io._file.store
            longest = max(hnwb.acquisition.values(), key=lambda s: s.data.shape[0])
            assert longest.name == "raw"  # 20,000 rows; raw_gzip has 4,000
            data = nwb.acquisition["raw"].data
            rows = data.chunks[0]
            assert until(lambda: store.stats.requests, 30)  # it runs in the background
            assert store.stats.requests == 1 and store.stats.keys == ["acquisition/raw/data/0.0"]
            assert_same_values(longest.data[:rows], data[:rows])
            assert store.stats.requests == 1  # served by the read-ahead
            gz = nwb.acquisition["raw_gzip"].data
            assert_same_values(hnwb.acquisition["raw_gzip"].data[:], gz[:])
            assert store.stats.requests > 1  # everything else is fetched when asked for
        finally:
            hio.close()


def test_the_main_recording_read_ahead_is_inflated_in_the_background(tmp_path):
    """A zlib chunk read ahead is handed to zarr as stored (level 0) zlib: the same values,
    decoded by a copy instead of an inflate while the first plot waits."""
    pytest.importorskip("pynwb")
    from datetime import datetime, timezone

    from hdmf.backends.hdf5 import H5DataIO
    from pynwb import NWBHDF5IO, NWBFile, TimeSeries

    path = tmp_path / "gz.nwb"
    values = (np.random.default_rng(4).standard_normal((6000, 8)) * 1000).astype("i2")
    f = NWBFile(session_description="d", identifier="gz", session_start_time=datetime(2024, 1, 1, tzinfo=timezone.utc))
    f.add_acquisition(TimeSeries(name="rec", data=H5DataIO(values, compression="gzip", chunks=(2000, 8)),
                                 unit="V", rate=1000.0))
    with NWBHDF5IO(str(path), "w") as io:
        io.write(f)
    with moto_s3() as s3:
        _upload(s3, path, "gz-bucket/gz.nwb")
        nwb = refindex.open_nwb("s3://gz-bucket/gz.nwb", storage_options=s3, cache=False, reader="zarr")
        store = nwb.refindex_io._file.store
        ahead = store._ahead["acquisition/rec/data/0.0"]
        assert until(ahead.done, 30)  # (an asyncio future of the store's loop: looked at, not waited on, here)
        assert ahead.result()[:2] == b"\x78\x01"  # zlib, stored blocks
        assert_same_values(values, nwb.acquisition["rec"].data[:])
        assert store.stats.keys.count("acquisition/rec/data/0.0") == 1


def test_stored_zlib_keeps_what_it_cannot_recode():
    import zlib

    import numcodecs

    from refindex.read.nwb import stored_zlib

    plain = np.arange(5000, dtype="<i2").tobytes()
    doc = {"compressor": {"id": "zlib", "level": 4}, "filters": None, "dtype": "<i2", "chunks": [5000]}
    recode = stored_zlib(doc)
    packed = zlib.compress(plain, 4)
    assert numcodecs.Zlib().decode(recode("k", packed)) == plain and recode("k", packed)[:2] == b"\x78\x01"
    assert stored_zlib({**doc, "chunks": [4000]})("k", packed) == packed  # not the chunk's size: as it was
    assert recode("k", b"not zlib") == b"not zlib"
    assert stored_zlib({**doc, "compressor": {"id": "gzip"}}) is None
    assert stored_zlib({**doc, "filters": [{"id": "shuffle"}]}) is None


def test_open_and_info_take_an_hdf5_file(h5path, tmp_path):
    with h5py.File(h5path, "w") as f:
        f["x"] = np.arange(100_000, dtype="i4")
    root = refindex.open(str(h5path), cache=False)
    assert_same_values(np.arange(100_000, dtype="i4"), root["x"][...])
    assert refindex.info(str(h5path), cache=False)["chunks_referenced"] == 1


@pytest.mark.parametrize("content, what", [(b"hello, this is a text file\n", "text file"),
                                           (b"\x89PNG\r\n\x1a\n" + bytes(50), "PNG image"),
                                           (b"CDF\x01" + bytes(50), "netCDF-3")])
def test_neither_index_nor_hdf5_is_a_clear_error(tmp_path, content, what):
    path = tmp_path / "thing.dat"
    path.write_bytes(content)
    for call in (refindex.open, refindex.open_nwb, refindex.info):
        with pytest.raises(refindex.RefindexError, match=f"neither a reference index .* nor an HDF5 file.*{what}"):
            call(str(path))
    named = tmp_path / "thing.nwb"  # a misleading name: the scan says what it is
    named.write_bytes(content)
    with pytest.raises(refindex.NotHDF5Error, match=what):
        refindex.open_nwb(str(named), cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(refindex.RefindexError, match="its JSON is invalid"):
            (tmp_path / "x.json").write_text("{oops")
            refindex.open(str(tmp_path / "x.json"))


def test_open_group_names_what_is_there_instead(tmp_path):
    """Issue 45: ``refindex.open("file.h5", group="group/data")`` answered "not an Icechunk repository
    (group/branch/snapshot were given)" for any group.  ``group=`` now opens a group of any index or
    file; a dataset or nothing there is a GroupNotFound (a ValueError too) saying so, with the groups
    of the nearest parent; in an Icechunk repository alike."""
    path = tmp_path / "g.h5"
    with h5py.File(path, "w") as f:
        f["group/data"] = np.arange(4.0)
        f["group/sub/x"] = np.arange(3)
        f["top"] = 1
    index = tmp_path / "g.json"
    refindex.scan_to_file(path, index)
    for target in (path, index):
        assert zvalues(refindex.open(target, group="group")["data"]).tolist() == [0.0, 1.0, 2.0, 3.0]
        assert zvalues(refindex.open(target, group="/group/sub/")["x"]).tolist() == [0, 1, 2]
        with pytest.raises(ValueError) as err:
            refindex.open(target, group="group/data")
        assert isinstance(err.value, refindex.GroupNotFound)
        assert str(err.value) == (f"{target}: group 'group/data' is an array (an HDF5 dataset), not a group; "
                                  "the groups in /group: /group/sub")
        with pytest.raises(refindex.GroupNotFound, match="^.*: group 'nope/x' is not in the file; the groups "
                                                         "in /: /group$"):
            refindex.open(target, group="nope/x")
    with pytest.raises(refindex.RefindexError, match="not an Icechunk repository: branch/snapshot name a version"):
        refindex.open(path, branch="dev")
    pytest.importorskip("icechunk")
    repo = tmp_path / "repo"
    refindex.scan_to_icechunk(path, repo, group="files/g")
    assert zvalues(refindex.open(repo, group="files/g/group/sub")["x"]).tolist() == [0, 1, 2]
    for group, said in (("files/g/group/data", "group 'files/g/group/data' is an array (an HDF5 dataset), "
                                               "not a group; the groups in /files/g/group: /files/g/group/sub"),
                        ("files/h", "group 'files/h' is not in /files; the groups in /files: /files/g")):
        with pytest.raises(refindex.GroupNotFound) as err:
            refindex.open(repo, group=group)
        assert str(err.value) == f"{repo}@main: {said}"
