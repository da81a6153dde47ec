"""The remote read cache (refindex.source.BlockCache) and metadata prefetch (refindex.prefetch).

Remote files are stood in for by fsspec's in-memory filesystem, which goes through the
same BlockCache path as s3:// or https:// (tests/test_remote.py covers real S3 via moto).
"""

from __future__ import annotations

import uuid

import fsspec
import h5py
import numpy as np
import pytest

import refindex
from refindex.source import BlockCache, FetchOptions, ReadStats

from conftest import assert_same_values, consumer_open, json_roundtrip


def to_memory(path) -> str:
    url = f"memory://refindex-test-{uuid.uuid4().hex}/{path.name}"
    fs = fsspec.filesystem("memory")
    fs.pipe_file(url, path.read_bytes())
    return url


def test_block_cache_returns_the_file_bytes():
    fs = fsspec.filesystem("memory")
    url = f"memory://refindex-test-{uuid.uuid4().hex}/blob"
    data = np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    fs.pipe_file(url, data)
    stats = ReadStats()
    raw = BlockCache(fs, url, len(data), FetchOptions(block_size=4096, first_read=8192, tail_read=5000), stats)
    assert (stats.requests, stats.round_trips) == (2, 1)  # head and tail in one go
    rng = np.random.default_rng(1)
    for _ in range(200):
        a = int(rng.integers(0, len(data)))
        b = a + int(rng.integers(0, 20_000))
        assert raw.read_range(a, b) == data[a:min(b, len(data))]
    raw.seek(len(data) - 10)
    assert raw.read() == data[-10:]
    assert stats.bytes_fetched <= len(data)
    assert stats.round_trips <= stats.requests


def test_neighbours_are_fetched_with_a_miss():
    fs = fsspec.filesystem("memory")
    url = f"memory://refindex-test-{uuid.uuid4().hex}/blob"
    fs.pipe_file(url, bytes(range(256)) * 1000)
    stats = ReadStats()
    raw = BlockCache(fs, url, 256_000, FetchOptions(block_size=1000, first_read=0, tail_read=0, neighbours=2,
                                                    ahead=0), stats)
    raw.read_range(50_500, 50_510)
    assert (stats.requests, stats.bytes_fetched) == (1, 5000)
    raw.read_range(48_000, 53_000)  # all cached
    assert stats.requests == 1


def test_blocks_ahead_of_a_miss_come_with_it():
    """The default looks ahead, not behind: what libhdf5 added to an object later lies after it."""
    fs = fsspec.filesystem("memory")
    url = f"memory://refindex-test-{uuid.uuid4().hex}/blob"
    data = bytes(range(256)) * 1000
    fs.pipe_file(url, data)
    stats = ReadStats()
    raw = BlockCache(fs, url, 256_000, FetchOptions(block_size=1000, first_read=0, tail_read=0), stats)
    assert raw.read_range(50_500, 50_510) == data[50_500:50_510]
    assert (stats.requests, stats.bytes_fetched) == (1, 3000)  # blocks 50, 51, 52
    assert raw.read_range(50_000, 53_000) == data[50_000:53_000]
    assert stats.requests == 1
    raw.read_range(49_990, 50_000)  # the block before was not fetched
    assert stats.requests == 2


def test_the_rest_of_a_small_file_comes_whole_once_a_third_is_needed():
    fs = fsspec.filesystem("memory")
    url = f"memory://refindex-test-{uuid.uuid4().hex}/blob"
    data = np.random.default_rng(2).integers(0, 256, 90_000, dtype=np.uint8).tobytes()
    fs.pipe_file(url, data)
    opts = FetchOptions(block_size=1000, first_read=10_000, tail_read=10_000, neighbours=0, ahead=0)
    stats = ReadStats()
    raw = BlockCache(fs, url, len(data), opts, stats)
    raw.prefetch([40_000, 45_000])  # 22 of 90 blocks: the rest is not worth it yet
    assert (stats.round_trips, stats.bytes_fetched) == (2, 22_000)
    raw.prefetch([50_000, 52_000])  # 24 of 90
    assert (stats.round_trips, stats.bytes_fetched) == (3, 24_000)
    raw.prefetch(list(range(54_000, 66_000, 2000)))  # 30 of 90 would be needed: all of it comes, in one round trip
    assert (stats.round_trips, stats.bytes_fetched) == (4, len(data))
    assert stats.requests > 4  # as concurrent parts
    assert raw.read_range(0, len(data)) == data
    assert stats.round_trips == 4
    big = ReadStats()  # a file above whole_file_max: only what is needed
    raw = BlockCache(fs, url, len(data), FetchOptions(**{**opts.__dict__, "whole_file_max": 50_000}), big)
    raw.prefetch([40_000, 45_000, 60_000, 70_000])
    assert big.bytes_fetched == 24_000


def _scattered(path, libver="earliest", userblock=0) -> None:
    """Groups and datasets created between bulk writes: their metadata lands all over the file."""
    rng = np.random.default_rng(3)
    with h5py.File(path, "w", libver=libver, userblock_size=userblock) as f:
        for i in range(6):
            g = f.create_group(f"g{i}")
            g.attrs["i"] = i
            g.create_dataset("bulk", data=rng.integers(0, 1 << 30, 40_000, dtype="i4"))
            sub = g.create_group("sub")
            sub.create_dataset("c", data=rng.standard_normal((400, 40)), chunks=(10, 40), compression="gzip")
            sub.create_dataset("name", data=f"group {i}")
            g.create_dataset("more", data=rng.integers(0, 1 << 30, 30_000, dtype="i4"))


SMALL = dict(block_size=4096, first_read=4096, tail_read=4096, neighbours=0)


@pytest.mark.parametrize("libver,userblock", [("earliest", 0), ("latest", 0), ("earliest", 512)])
def test_prefetch_changes_requests_not_the_index(tmp_path, libver, userblock):
    path = tmp_path / "scattered.h5"
    _scattered(path, libver, userblock)
    url = to_memory(path)
    on, off = {}, {}
    refs_on = refindex.scan(url, fetch=FetchOptions(**SMALL, prefetch_metadata=True), stats=on)
    refs_off = refindex.scan(url, fetch=FetchOptions(**SMALL, prefetch_metadata=False), stats=off)
    assert json_roundtrip(refs_on) == json_roundtrip(refs_off)
    if libver == "earliest" and not userblock:  # the structures prefetch understands
        assert on["round_trips"] < off["round_trips"], (on, off)
    g = consumer_open(json_roundtrip(refs_on))
    with h5py.File(path, "r") as f:
        for i in range(6):
            assert_same_values(f[f"g{i}/sub/c"][...], g[f"g{i}/sub/c"][...])
            assert_same_values(f[f"g{i}/bulk"][...], g[f"g{i}/bulk"][...])


def test_fetch_options_keep_their_former_names_with_a_warning(tmp_path):
    """The scan option that tunes the block cache's fetches is ``fetch=FetchOptions(...)``; its former names
    (``cache=``, ``CacheOptions``, ``ScanOptions.cache``) still work, each with a DeprecationWarning that
    points at the caller, and give the same options (same requests, same index) as the new names."""
    path = tmp_path / "scattered.h5"
    _scattered(path, "earliest", 0)
    url = to_memory(path)
    new_stats, old_stats = {}, {}
    new = refindex.scan(url, fetch=FetchOptions(**SMALL, prefetch_metadata=False), stats=new_stats)
    with pytest.warns(DeprecationWarning, match="'cache' is now 'fetch'") as caught:
        old = refindex.scan(url, cache=FetchOptions(**SMALL, prefetch_metadata=False), stats=old_stats)
    assert [w.filename for w in caught] == [__file__]
    assert json_roundtrip(old) == json_roundtrip(new)
    assert old_stats["requests"] == new_stats["requests"] and old_stats["round_trips"] == new_stats["round_trips"]
    with pytest.warns(DeprecationWarning, match="CacheOptions is now") as caught:
        assert refindex.CacheOptions is FetchOptions
        from refindex.options import CacheOptions
        assert CacheOptions is FetchOptions
    assert [w.filename for w in caught] == [__file__, __file__]
    with pytest.warns(DeprecationWarning, match="'cache' is now 'fetch'") as caught:
        options = refindex.ScanOptions(cache=FetchOptions(block_size=1000))
        assert options.fetch.block_size == 1000 and options.cache is options.fetch
        assert options.but(portable=True).fetch.block_size == 1000
    assert len(caught) == 2 and {w.filename for w in caught} == {__file__}


def test_default_cache_scan_equals_local_scan(tmp_path):
    path = tmp_path / "scattered.h5"
    _scattered(path)
    url = to_memory(path)
    stats = {}
    remote = refindex.scan(url, url=str(path), stats=stats)
    local = refindex.scan(path)
    remote["refindex"]["source"] = local["refindex"]["source"] = None  # etag/mtime differ by backend
    assert json_roundtrip(remote) == json_roundtrip(local)
    assert stats["bytes_fetched"] <= path.stat().st_size


def test_only_backends_known_to_read_suffix_ranges_are_asked_for_one():
    """A backend that read ``start=-n`` another way would put wrong bytes where the tail is kept."""
    from fsspec.asyn import AsyncFileSystem

    from refindex.source._open import info_and_ends

    data = bytes(range(256)) * 40

    class Elsewhere(AsyncFileSystem):
        protocol = "elsewhere"
        asked: list = []

        async def _info(self, path, **kw):
            return {"name": path, "size": len(data), "type": "file"}

        async def _cat_file(self, path, start=None, end=None, **kw):
            self.asked.append((start, end))
            return data[max(0, start or 0): end]  # reads -n as 0: the head, not the tail

    fs = Elsewhere(skip_instance_cache=True)
    info, ends = info_and_ends(fs, "x", FetchOptions())
    assert info["size"] == len(data) and ends is None and fs.asked == []
    stats = ReadStats()
    raw = BlockCache(fs, "x", len(data), FetchOptions(block_size=1000, first_read=2000, tail_read=2000), stats)
    assert raw.read_range(0, len(data)) == data  # head and tail fetched by offset, as before


# ---------------------------------------------------------------- what the prefetch sees of a file held whole


def _walked(h5: h5py.File) -> tuple[int, int, list[str]]:
    """The tree as the prefetch's walk sees it, a group at a time: hard-link targets (each group's
    links read once), links into other files, virtual datasets reading other files."""
    from h5py import h5d, h5g, h5l, h5o

    targets: set[int] = set()
    external, elsewhere = 0, []
    groups = [(h5.id, "")]
    while groups:
        gid, where = groups.pop(0)
        names: list[bytes] = []
        gid.links.iterate(names.append)
        for name in names:
            info = gid.links.get_info(name)
            external += info.type == h5l.TYPE_EXTERNAL
            if info.type != h5l.TYPE_HARD or info.u in targets:
                continue
            targets.add(info.u)
            oid, path = h5o.open(gid, name), f"{where}/{name.decode()}"
            if isinstance(oid, h5g.GroupID):
                groups.append((oid, path))
            elif isinstance(oid, h5d.DatasetID) and h5py.Dataset(oid).is_virtual:
                if any(s.file_name != "." for s in h5py.Dataset(oid).virtual_sources()):
                    elsewhere.append(path)
    return len(targets), external, sorted(elsewhere)


def _reaching_file(path) -> None:
    """Links into other files, virtual datasets reading this file and another, a group linked twice,
    a hard-link cycle and a soft link (neither followed)."""
    with h5py.File(path.parent / "source.h5", "w") as s:
        s["x"] = np.arange(10)
    with h5py.File(path, "w") as f:
        for i in range(5):
            f[f"g{i}/data"] = np.arange(i + 1)
        f["g1/twice"] = f["g0"]
        f["g2/up"] = f["g2"]
        f["g3/soft"] = h5py.SoftLink("/g4")
        f["g3/out"] = h5py.ExternalLink("other.h5", "/x")
        f["out"] = h5py.ExternalLink("source.h5", "/x")
        for name, source, dataset, n in (("elsewhere", "source.h5", "x", 10), ("here", ".", "g4/data", 5)):
            layout = h5py.VirtualLayout(shape=(n,), dtype="i8")
            layout[:] = h5py.VirtualSource(source, dataset, shape=(n,))
            f["g4"].create_virtual_dataset(name, layout, fillvalue=-1)


def _seen_whole_cases() -> list:
    from corpus import CORPUS, manifest_rows

    return ["built"] + [pytest.param(str(CORPUS / r["relpath"]), id=r["relpath"]) for r in manifest_rows()]


@pytest.mark.parametrize("target", _seen_whole_cases())
def test_a_file_held_whole_is_seen_as_the_walk_sees_it(target, tmp_path):
    """Once the cache holds a whole file, the prefetch asks libhdf5's visits instead of walking on
    (refindex.source._prefetch.seen_whole): the same objects, links into other files and virtual
    datasets reading other files as a walk of the file's tree, for every corpus file and a file of
    every kind of link; what the walk found already is kept, never listed twice."""
    from refindex.source._prefetch import seen_whole

    path = tmp_path / "reaching.h5" if target == "built" else target
    if target == "built":
        _reaching_file(path)
    try:
        h5 = h5py.File(path, "r")
    except OSError:
        pytest.skip("not a file h5py opens")  # (the corpus's raw external-storage blobs)
    with h5:
        objects, external, elsewhere = _walked(h5)
        seen = seen_whole(h5, set(), [])
        assert seen.complete and (seen.objects, seen.external_links, sorted(seen.reads_elsewhere)) == (
            objects, external, elsewhere)
        if target == "built":
            assert (objects, external, elsewhere) == (12, 2, ["/g4/elsewhere"])
            walked = h5py.h5o.get_info(h5["g4/elsewhere"].id).addr
            again = seen_whole(h5, {walked}, ["/g4/elsewhere"])
            assert again.reads_elsewhere == ["/g4/elsewhere"] and again.objects == objects
            assert not seen_whole(h5, set(), [], limit=5).complete


def test_what_a_cache_holds_is_the_files_bytes_in_disjoint_spans():
    """Blocks and the pieces kept while recording, overlapping or adjoining one another, as the h5py road
    takes them for pages (refindex.source.held_bytes): each span's bytes are the file's."""
    from refindex.source import held_bytes

    fs = fsspec.filesystem("memory")
    url = f"memory://refindex-test-{uuid.uuid4().hex}/blob"
    data = np.random.default_rng(3).integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    fs.pipe_file(url, data)
    raw = BlockCache(fs, url, len(data), FetchOptions(block_size=1000, first_read=3000, tail_read=1500), ReadStats())
    raw.read_range(40_500, 41_200)
    raw.pieces.update({2_500: data[2_500:3_600], 3_600: data[3_600:3_700], 10_000: data[10_000:10_010],
                       10_005: data[10_005:10_020], 40_600: data[40_600:40_700], 90_000: data[90_000:95_000]})
    starts, ends, held = held_bytes(raw)
    assert starts == sorted(starts) and all(e > s for s, e in zip(starts, ends))
    assert all(a > b for a, b in zip(starts[1:], ends))  # disjoint, adjoining ones joined
    assert (starts[0], ends[0]) == (0, 3_700) and (10_000, 10_020) in zip(starts, ends)
    at = 0
    for s, e in zip(starts, ends):
        assert held[at: at + e - s] == data[s:e]
        at += e - s
    assert at == len(held)
