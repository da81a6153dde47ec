"""The native chunk-index readers list exactly what libhdf5 lists, or leave the dataset to libhdf5.

Every chunked dataset of the shared corpus and of files built here with every index type
libhdf5 writes (refindex.testing.indexfiles: version 1 B-trees under each superblock,
'K' and address size; single-chunk, implicit, fixed array (paged), extensible array (super
blocks, paged data blocks), version 2 B-tree (internal nodes); filtered or not, partial and
unfiltered edge chunks, chunks with a filter skipped, resized, empty) is listed natively and
compared with ``chunk_iter``, the index type with libhdf5's own (``H5Dget_chunk_index_type``).
Extensible arrays whose unlimited dimension is not the first are compared with libhdf5's read
path instead: its ``chunk_iter`` numbers their chunks wrongly (HDF5 2.0).
The rest of the suite compares every native table it makes too (``REFINDEX_CHECK_CHUNK_INDEX``).
"""

from __future__ import annotations

import collections
import json
import random
from contextlib import contextmanager

import h5py
import numpy as np
import pytest

import refindex
from refindex.isolation.worker import Worker
from refindex.model import ChunkTable
from refindex.options import ScanOptions
from refindex.scanner import ScanContext
from refindex.errors import IndexMismatch
from refindex.scanner._listing import check_listing, native_listing
from refindex.scanner.chunkindex import Unparsed
from refindex.source import open_source
from refindex.testing import indexfiles

from corpus import CORPUS, MISSING, manifest_rows  # noqa: E402
import webserver

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    return indexfiles.build_all(tmp_path_factory.mktemp("zoo"))


def compare_file(path: str, tally: collections.Counter, fallbacks: list, diffs: list) -> None:
    """Native listing vs libhdf5's for every chunked dataset of ``path``, read through the source layer."""
    with open_source(path) as src:
        ctx = ScanContext(src.h5, src.url, src.size, ScanOptions(), src.read_many)
        for d in indexfiles.chunked_datasets(src.h5):
            kind = indexfiles.index_type(d)
            try:
                listing, index, _ = native_listing(ctx, d, d.id.get_create_plist())
            except Unparsed as e:
                fallbacks.append(f"{path} {d.name} ({kind}): {e.reason}")
                continue
            assert index == kind, f"{path} {d.name}: layout message read as {index}, libhdf5 says {kind}"
            table = ChunkTable(listing.coords, listing.offsets, listing.sizes)
            try:
                check_listing(ctx, d, d.ndim, d.chunks, (), index, table, listing.masks)
            except IndexMismatch as e:
                diffs.append(str(e))
                continue
            swizzled = index == "earray" and d.maxshape[0] is not None
            tally[index + (" (unlimited dimension not first: read path)" if swizzled else "")] += 1


def test_native_tables_equal_libhdf5(zoo, capsys):
    corpus = [str(CORPUS / r["relpath"]) for r in manifest_rows() if not r["notes"].startswith("NOT HDF5")]
    tally: collections.Counter = collections.Counter()
    fallbacks: list[str] = []
    diffs: list[str] = []
    for path in corpus + zoo:
        try:
            compare_file(path, tally, fallbacks, diffs)
        except refindex.NotHDF5Error:
            continue
    with capsys.disabled():
        print(f"\nnative chunk tables vs libhdf5 ({len(corpus)} corpus files, {len(zoo)} built files):")
        for kind, n in sorted(tally.items()):
            print(f"  {kind:58s} {n:4d} datasets, equal")
        print(f"  differences: {len(diffs)}; fell back to libhdf5: {len(fallbacks)}")
        for line in fallbacks:
            print("   ", line)
    assert diffs == []
    assert fallbacks == []
    want = {"btree1": 150, "single": 60, "implicit": 5, "farray": 50, "earray": 20, "btree2": 20,
            "earray (unlimited dimension not first: read path)": 4}
    if not corpus:  # a clone without the corpus (a user's): the built files alone hold every kind of index
        print(f"({MISSING}: built files only)")
        want = {"btree1": 50, "single": 5, "implicit": 2, "farray": 10, "earray": 5, "btree2": 5,
                "earray (unlimited dimension not first: read path)": 4}
    assert {k: tally[k] >= n for k, n in want.items()} == {k: True for k in want}, tally


def test_fuzzed_index_structures_fall_back_or_agree(tmp_path, capsys):
    """Bits flipped, bytes zeroed or set in index structures: the native readers refuse (libhdf5 lists the
    dataset then) or list exactly what libhdf5 lists; never other chunks, never an exception of their own."""
    files = indexfiles.build_fuzz_files(tmp_path)
    rng = random.Random(20261126)
    outcomes: collections.Counter = collections.Counter()
    findings: list[str] = []
    with Worker(memory_limit=2 << 30) as worker:
        for path in files:
            data = open(path, "rb").read()
            ranges = indexfiles.index_ranges(path)
            for i in range(40):
                buf = bytearray(data)
                a, b = rng.choice(ranges)
                what = rng.choice(["flip", "flip", "zero", "ff"])
                if what == "flip":
                    for _ in range(rng.randint(1, 3)):
                        buf[rng.randrange(a, b)] ^= 1 << rng.randrange(8)
                else:
                    start = rng.randrange(a, b)
                    end = min(b, start + rng.randint(1, 16))
                    buf[start:end] = bytes([0 if what == "zero" else 0xFF]) * (end - start)
                case = tmp_path / f"case{i % 2}.h5"
                case.write_bytes(bytes(buf))
                try:
                    got = worker.run(indexfiles.index_case, {"source": str(case)}, timeout=30)
                except refindex.RefindexError as e:  # libhdf5 crashed or hung on the damaged file
                    outcomes[type(e).__name__] += 1
                    continue
                outcomes.update(got["outcomes"])
                findings += [f"{path} [{what} in {a}-{b}]: {x}" for x in got["details"]]
    with capsys.disabled():
        print(f"\nfuzzed index structures: {dict(outcomes)}")
    assert findings == []
    assert not [k for k in outcomes if k.startswith("internal") or k in ("mismatch", "native-only")]
    assert outcomes["same"] > 0 and outcomes["fallback"] + outcomes["both-fail"] > 0


# ------------------------------------------------------------------ scans
@contextmanager
def serve(path):
    """The file at ``path`` on the suite's loopback server (Range support, no validators): (server, its URL)."""
    with webserver.serve(etag=False, last_modified=False) as server:
        yield server, server.put(path.name, path.read_bytes())


def _deep_tree(path, chunks=5000, size=256):
    """A version 1 B-tree of three levels (about 80 leaves) whose leaves lie between the 5 MB of data they
    index, 64 KB apart (written in slabs, as a recording grows)."""
    n = chunks * size
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", shape=(n,), maxshape=(None,), chunks=(size,), dtype="<i4")
        for lo in range(0, n, 64 * size):
            d[lo:lo + 64 * size] = np.arange(lo, min(n, lo + 64 * size), dtype="<i4")


def test_remote_scan_reads_the_index_a_level_per_round_trip(tmp_path, monkeypatch):
    from refindex.source import FetchOptions

    monkeypatch.delenv("REFINDEX_CHECK_CHUNK_INDEX", raising=False)  # its chunk_iter would read the nodes again
    p = tmp_path / "deep.h5"
    _deep_tree(p)
    # a cache sized as for a file of gigabytes: the nodes are not in the head, tail or whole-file reads
    fetch = FetchOptions(first_read=64 << 10, tail_read=64 << 10, whole_file_max=0)
    with serve(p) as (handler, url):
        seen = {}
        for native in (True, False):
            stats: dict = {}
            refs = refindex.scan(url, stats=stats, native_index=native, inline_threshold=0, fetch=fetch)
            seen[native] = (stats, refs)
        stats, refs = seen[True]
        with h5py.File(p) as f:
            np.testing.assert_array_equal(refindex.open(refs)["x"][:], f["x"][()])
    assert stats["chunk_index"]["native"] == {"btree1": 1} and stats["chunk_index"]["libhdf5"] == 0
    assert stats["chunk_index"]["index_fetches"] == 3  # root, its children, the leaves: one wait each
    assert stats["round_trips"] + 10 < seen[False][0]["round_trips"]  # libhdf5 waits for nodes one at a time
    # the same index either way, but for where its pages say the chunk index's nodes lie (the h5py road's
    # hint for fetching them at once): native reads note each node exactly, libhdf5's reads the cache's blocks
    other = seen[False][1]
    for r in (refs, other):
        assert r["refindex"]["pages"].pop("index_ranges")["/x"]
    assert refs == other


def test_concurrent_ranges_long_ones_in_parts_a_failed_one_retried_alone(tmp_path, monkeypatch):
    """The source layer's many-range read (what a tree level is fetched with): one round trip of concurrent
    requests, a range longer than a part split into parts, and a request that failed asked for again alone."""
    import fsspec

    import refindex.source as source_mod
    from refindex.source import BlockCache, FetchOptions

    monkeypatch.setattr(source_mod.retry_policy, "backoff", 0.01)
    p = tmp_path / "blob.bin"
    data = np.random.default_rng(5).integers(0, 256, 12 << 20, dtype=np.uint8).tobytes()
    p.write_bytes(data)
    part = 2 << 20
    with serve(p) as (handler, url):
        fs = fsspec.filesystem("http", skip_instance_cache=True)
        cache = BlockCache(fs, url, len(data))  # fetches the file's head and tail
        offsets = [(3 << 20) + i * (200 << 10) for i in range(20)]  # 20 ranges too far apart to merge
        handler.failing_ranges = {(offsets[7], offsets[7] + 1000)}
        before = (cache.stats.requests, cache.stats.round_trips)
        got = cache.read_ranges(offsets, [1000] * 20)
        assert got == [data[o:o + 1000] for o in offsets]
        assert (cache.stats.requests - before[0], cache.stats.round_trips - before[1]) == (21, 2)
        before = cache.stats.requests
        assert cache.read_ranges([1 << 20], [5 << 20]) == [data[1 << 20:6 << 20]]
        assert cache.stats.requests - before == -(-(5 << 20) // part)  # three parts side by side
        # at most ``concurrency`` requests in flight (a level of a big index is thousands of ranges)
        handler.delay, handler.peak = 0.02, 0
        few = BlockCache(fs, url, len(data), FetchOptions(first_read=0, tail_read=0, concurrency=3))
        offsets = [(3 << 20) + i * (200 << 10) + 7 for i in range(12)]
        assert few.read_ranges(offsets, [500] * 12) == [data[o:o + 500] for o in offsets]
        assert (few.stats.requests, few.stats.round_trips) == (12, 1)
        # the server counts a request until its handler returns, which may be after the client has the
        # bytes and started the next one: one more than the limit can overlap there (without it: 12)
        assert 2 <= handler.peak <= 3 + 1


def test_extensible_array_whose_unlimited_dimension_is_not_first(tmp_path):
    """libhdf5's chunk_iter lists these chunks at other positions than its reads use: an index built on
    it read other values (silently, remotely).  The native reader numbers them as the reads do; listed by
    libhdf5 (native_index=False), the values are copied in."""
    p = tmp_path / "ea.h5"
    with h5py.File(p, "w", libver="latest") as f:
        d = f.create_dataset("x", shape=(3, 10), maxshape=(3, None), chunks=(1, 2), dtype="<i4")
        d[:, 0:2] = [[1, 1], [2, 2], [3, 3]]  # only the first column of chunks is written
        f.create_dataset("y", data=np.arange(60, dtype="<i4").reshape(3, 4, 5), maxshape=(3, None, 5), chunks=(2, 3, 2))
    for native in (True, False):
        refs = refindex.scan(str(p), native_index=native, check_sample=False, inline_threshold=0)
        z = refindex.open(refs)
        with h5py.File(p) as f:
            for name in ("x", "y"):
                np.testing.assert_array_equal(z[name][...], f[name][()])
                inlined = "refindex_inlined" in refindex.read.notes(refs, name)
                assert inlined is (not native), (name, native)


def test_chunk_runs_list_every_chunked_dataset_in_grid_order_and_skip_what_libhdf5_cannot_open(tmp_path, monkeypatch):
    """The h5py road's tables without a scan (refindex.scanner.chunk_runs): each chunked dataset's chunks
    where libhdf5 says they lie, in C order of the chunk grid whatever order the index keeps them in (an
    array written backwards), none for contiguous data; a dataset libhdf5 cannot open is left out, not
    the open's failure (h5py's own read of it will say why)."""
    from refindex.scanner import chunk_runs

    path = tmp_path / "runs.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("grid", shape=(40, 30), chunks=(10, 10), dtype="i4")
        for i in reversed(range(4)):  # stored last row of chunks first
            for j in reversed(range(3)):
                d[i * 10:(i + 1) * 10, j * 10:(j + 1) * 10] = i * 3 + j
        f.create_dataset("other/deep", data=np.arange(100.0), chunks=(7,), compression="gzip")
        f["flat"] = np.arange(10)
    data = path.read_bytes()

    def fetch(offsets, sizes):
        return [data[o:o + n] for o, n in zip(offsets, sizes)]

    with h5py.File(path, "r") as f:
        runs = chunk_runs(f, fetch, len(data))
        assert sorted(runs) == ["/grid", "/other/deep"]
        for name, (offsets, sizes) in runs.items():
            ds = f[name]
            infos = [ds.id.get_chunk_info(i) for i in range(ds.id.get_num_chunks())]
            want = {info.chunk_offset: info for info in infos}
            order = sorted(want)  # chunk offsets in C order of the grid
            assert offsets.tolist() == [want[o].byte_offset for o in order]
            assert sizes.tolist() == [want[o].size for o in order]
        real = h5py.h5d.open
        monkeypatch.setattr(h5py.h5d, "open", lambda loc, name, *a: (_ for _ in ()).throw(KeyError(name))
                            if name == b"grid" else real(loc, name, *a))
        assert sorted(chunk_runs(f, fetch, len(data))) == ["/other/deep"]
