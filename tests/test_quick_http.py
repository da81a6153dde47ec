"""refindex's own HTTP requests (refindex.source._http): the few requests of an open (an index, a
freshness check) go through the standard library instead of fsspec's aiohttp backend, whose import
alone is longer than both round trips.  They must answer exactly as fsspec's HTTP filesystem does,
fail in the same words, and leave an indexed file's open on the h5py road free of aiohttp."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import fsspec
import h5py
import numpy as np
import pytest

import refindex
import webserver
from waiting import until
from refindex.errors import SourceError, StaleIndexError
from refindex.options import FetchOptions
from refindex.read.index._load import load_refs
from refindex.source import QuickHTTP, described, quick_filesystem, retry_policy
from refindex.source._http import MANY

DATA = bytes(range(256)) * 40  # 10 KiB
SERVERS = {"etag+last-modified": {}, "last-modified": dict(etag=False), "neither": dict(etag=False, last_modified=False),
           "no ranges": dict(ranges=False), "parts without Content-Range": dict(content_range=False)}


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(retry_policy, "backoff", 0.01)


@pytest.mark.parametrize("kind", SERVERS)
def test_it_answers_as_fsspec_http_does(kind):
    """info (the validators a freshness check compares), whole files, ranges, several ranges at once:
    the same answers as fsspec's HTTP filesystem, from servers with and without ETag, Last-Modified, Range."""
    with webserver.serve(**SERVERS[kind]) as server:
        url = server.put("f.bin", DATA, mtime=1_700_000_000.5)
        quick, path = quick_filesystem(url)
        assert isinstance(quick, QuickHTTP) and path == url
        slow = fsspec.filesystem("http", skip_instance_cache=True)
        assert described(quick.info(url)) == described(slow.info(url))
        assert quick.info(url)["size"] == len(DATA) and quick.size(url) == len(DATA)
        assert quick.exists(url) and not quick.exists(server.url("nothing.bin"))
        assert quick.cat_file(url) == slow.cat_file(url) == DATA
        for a, b in [(0, 10), (100, 5000), (len(DATA) - 7, len(DATA))]:
            assert quick.cat_file(url, a, b) == slow.cat_file(url, start=a, end=b)  # (Range ignored: the whole file)
        starts, ends = [0, 300, 9000], [10, 700, 10240]
        assert quick.cat_ranges([url] * 3, starts, ends) == slow.cat_ranges([url] * 3, starts, ends)
        for head in (True, False):  # a HEAD beside the ranges, or the info read off their answers
            info, *datas = quick.info_and_ranges(url, list(zip(starts, ends)), head=head)
            assert described(info)["size"] == len(DATA) and datas == slow.cat_ranges([url] * 3, starts, ends)
            assert described(info) == described(slow.info(url))
        many = [(i * 100, i * 100 + 7) for i in range(MANY + 1)]  # a batch it may hand to fsspec
        info, *datas = quick.info_and_ranges(url, many)
        assert described(info) == described(slow.info(url))
        assert datas == slow.cat_ranges([url] * len(many), [a for a, _ in many], [b for _, b in many])


def test_redirects_gzip_and_headers_as_fsspec():
    """A redirect is followed (an archive's download URL pointing at its object store), a body stored
    gzip-compressed is decoded, the user's headers are sent."""
    index = {"version": 1, "refs": {".zgroup": json.dumps({"zarr_format": 2})}}
    with webserver.serve() as server:
        server.put("index.json", json.dumps(index).encode())
        server.put("packed.json", json.dumps(index).encode(), gzip=True)
        server.redirects["download/index.json"] = server.url("index.json")
        for name in ("index.json", "packed.json", "download/index.json"):
            assert load_refs(server.url(name)) == index == load_refs(server.url(name), {"client_kwargs": {}}), name
        quick = QuickHTTP({"X-Token": "t"})
        url = server.url("download/index.json")
        assert quick.info(url)["url"] == server.url("index.json")  # where it was found, as fsspec reports
        assert quick.info(url)["size"] == len(json.dumps(index))
        server.requests.clear()
        quick.cat_file(url, 0, 4)
        assert [r[2] for r in server.requests] == ["bytes=0-3", "bytes=0-3"]  # the redirect, then the file


def test_options_it_does_not_honour_go_to_fsspec():
    quick, _ = quick_filesystem("http://example.org/f.json", {"headers": {"A": "b"}, "block_size": 1})
    assert isinstance(quick, QuickHTTP) and quick.headers == {"A": "b"}
    for so in ({"client_kwargs": {"trust_env": True}}, {"headers": "not a mapping"}):
        assert not isinstance(quick_filesystem("http://example.org/f.json", so)[0], QuickHTTP)
    assert not isinstance(quick_filesystem("s3://bucket/f.json", {})[0], QuickHTTP)
    assert not isinstance(quick_filesystem("https://user:secret@example.org/f.json")[0], QuickHTTP)


@pytest.mark.parametrize("options", [None, {"client_kwargs": {}}], ids=["quick", "fsspec"])
def test_failures_say_the_same_either_way(options):
    """Missing, forbidden, a server error that outlasts the retries, no server at all: the same
    refindex error through refindex's own requests as through fsspec's."""
    with webserver.serve() as server:
        server.put("secret.json", b"{}")
        server.statuses["secret.json"] = 403
        server.statuses["busy.json"] = 503
        cases = {"missing.json": "index not found",
                 "secret.json": "the server refused access (HTTP 403): the URL may need credentials or a signed link",
                 "busy.json": "could not read the index: "}
        for name, said in cases.items():
            with pytest.raises(SourceError) as e:
                load_refs(server.url(name), options)
            assert str(e.value).startswith(f"{server.url(name)}: {said}"), str(e.value)
        assert sum(1 for r in server.requests if r[1] == "/busy.json") == 1 + retry_policy.retries  # retried
    port = webserver_free_port()
    url = f"http://127.0.0.1:{port}/x.json"
    with pytest.raises(SourceError) as e:
        load_refs(url, options)
    assert str(e.value) == (f"{url}: cannot connect to 127.0.0.1:{port} (connection refused): "
                            "is the server running and the URL right?")


def webserver_free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chunked(path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.arange(40_000, dtype="<i4").reshape(400, 100), chunks=(50, 100),
                         compression="gzip")
        f["data"].attrs["units"] = "volts"
        f.create_group("group").create_dataset("small", data=np.arange(5.0))


CHILD = textwrap.dedent("""
    import json, sys
    import h5py, refindex
    f = refindex.h5py_file(sys.argv[1])
    opened = {"aiohttp": "aiohttp" in sys.modules, "units": f["data"].attrs["units"],
              "small": f["group/small"][()].tolist(), "stats": f.refindex_file.stats.as_dict()}
    data = f["data"][()]
    print(json.dumps({**opened, "sum": int(data.sum()), "shape": list(data.shape),
                      "aiohttp_after_data": "aiohttp" in sys.modules}))
""")


def test_an_indexed_file_opens_on_the_h5py_road_without_aiohttp(tmp_path):
    """What the user waits for at open: the index and the freshness check, made without importing
    aiohttp (0.2 s), nor later for its first chunks (read ahead in batches of up to 16 ranges); the
    values equal h5py's; a changed file is still refused."""
    _chunked(tmp_path / "data.h5")
    with webserver.serve() as server:
        url = server.put("data.h5", (tmp_path / "data.h5").read_bytes(), mtime=1_700_000_000)
        index = server.put("data.json", json.dumps(refindex.scan(url)).encode())
        server.requests.clear()
        out = subprocess.run([sys.executable, "-c", CHILD, index], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        with h5py.File(tmp_path / "data.h5", "r") as h:
            want = {"units": h["data"].attrs["units"], "small": h["group/small"][()].tolist(),
                    "sum": int(h["data"][()].sum()), "shape": list(h["data"].shape)}
        assert {k: got[k] for k in want} == want
        assert not got["aiohttp"] and got["stats"]["requests"] == 0  # opened from the pages, no aiohttp
        assert not got["aiohttp_after_data"]  # its chunks too: batches of up to 16 ranges
        opening = server.requests[: server.requests.index(("HEAD", "/data.h5", None)) + 1]
        assert opening == [("GET", "/data.json", None), ("HEAD", "/data.h5", None)]  # index, freshness (ETag)
        with h5py.File(tmp_path / "data.h5", "a") as h:
            h["data"][0, 0] = -1
        server.put("data.h5", (tmp_path / "data.h5").read_bytes(), mtime=1_700_000_100)
        with pytest.raises(StaleIndexError, match="changed since it was indexed"):
            refindex.h5py_file(index)


def test_a_large_batch_of_ranges_goes_to_fsspec():
    with webserver.serve() as server:
        url = server.put("f.bin", DATA)
        quick = QuickHTTP()
        starts = list(range(0, 40 * 200, 200))
        ends = [s + 100 for s in starts]
        assert quick.cat_ranges([url] * 40, starts, ends) == [DATA[a:b] for a, b in zip(starts, ends)]
        assert quick.for_many(40) is not quick and type(quick.for_many(40)).__name__ == "HTTPFileSystem"
        assert quick.for_many(3) is quick


def test_a_batch_of_large_ranges_stays_with_its_threads(monkeypatch):
    """A whole small file fetched in parts (a few dozen ranges of a MiB or so) costs its transfer, not its
    requests: refindex's own client fetches it, without importing aiohttp for it."""
    from refindex.source import _http

    big = bytes(np.random.default_rng(4).integers(0, 256, 24 * _http.LARGE_PART, dtype=np.uint8))
    served = []
    real = QuickHTTP.for_many
    monkeypatch.setattr(QuickHTTP, "for_many", lambda self, n, nbytes=0: served.append(real(self, n, nbytes) is self)
                        or real(self, n, nbytes))
    with webserver.serve() as server:
        url = server.put("big.bin", big)
        quick = QuickHTTP()
        starts = [i * _http.LARGE_PART for i in range(24)]
        ends = [a + _http.LARGE_PART for a in starts]
        assert quick.cat_ranges([url] * 24, starts, ends) == [big[a:b] for a, b in zip(starts, ends)]
        assert served == [True]
        assert len([r for r in server.requests if r[0] == "GET"]) == 24
        small = [a + 100 for a in starts]
        assert quick.cat_ranges([url] * 24, starts, small) == [big[a:b] for a, b in zip(starts, small)]
        assert served == [True, False]  # small ranges: fsspec's event loop


def _many_nodes(path) -> None:
    """Small files and one whose chunk index has hundreds of B-tree nodes (a level is a large batch)."""
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("many", data=np.arange(2_000_000, dtype="<i4"), chunks=(500,))
        f.create_dataset("few", data=np.arange(5.0))
        f.attrs["title"] = "scanned"


@pytest.mark.parametrize("kind", ["etag+last-modified", "no ranges"])
def test_a_scan_through_it_makes_the_same_index_as_through_fsspec(tmp_path, kind, monkeypatch):
    """The scan's requests (the file's info with its head and tail, the tree's levels) go through
    refindex's own client, a large level through fsspec: the same index either way, values as h5py's."""
    _many_nodes(tmp_path / "f.h5")
    batches = []
    real = QuickHTTP.for_many
    monkeypatch.setattr(QuickHTTP, "for_many", lambda self, n, nbytes=0: batches.append(n) or real(self, n, nbytes))
    with webserver.serve(**SERVERS[kind]) as server:
        url = server.put("f.h5", (tmp_path / "f.h5").read_bytes(), mtime=1_700_000_000)
        small = FetchOptions(block_size=4096, first_read=4096, tail_read=4096)  # many small blocks: large batches
        quick = refindex.scan(url, inline_dataset_threshold=0, fetch=small)
        if kind != "no ranges":  # (a server without Range support sends the whole file at once)
            assert max(batches) > refindex.source._http.MANY  # the index's nodes: a batch for fsspec
        slow = refindex.scan(url, inline_dataset_threshold=0, fetch=small, storage_options={"client_kwargs": {}})
        assert quick == slow
        z = refindex.open(quick)
        with h5py.File(tmp_path / "f.h5", "r") as h:
            for part in (slice(0, 3000), slice(-3000, None)):  # (4000 chunks, a request each: a sample)
                assert np.array_equal(z["many"][part], h["many"][part])
            assert np.array_equal(z["few"][:], h["few"][()])


GATE = textwrap.dedent("""
    import importlib.abc, json, sys, threading
    sys.path[:0] = {paths!r}
    import h5py, refindex
    import webserver

    arrived = threading.Event()
    waited = []

    class Gate(importlib.abc.MetaPathFinder):  # a module loads only once a request was made
        def find_spec(self, name, path=None, target=None):
            if name == {held!r}:
                waited.append(arrived.wait(20))
            return None

    class Seen(list):
        def append(self, request):
            super().append(request)
            if tuple(request[:2]) == {request!r}:
                arrived.set()

    sys.meta_path.insert(0, Gate())
""")


def gated(held: str, request: tuple[str, str], body: str) -> str:
    """A child process's code: ``body`` run while module ``held`` cannot load before the server
    was sent ``request`` (method, path); ``waited`` then says whether it came (in 20 s)."""
    return GATE.format(paths=sys.path, held=held, request=request) + body


EARLY = textwrap.dedent("""
    with webserver.serve() as server:
        url = server.put("data.h5", open({path!r}, "rb").read(), mtime=1_700_000_000)
        text = open({index!r}).read().replace({scanned!r}, url)  # the index names this server's copy
        index = server.put("data.json", text.encode())
        server.requests = Seen()
        f = refindex.h5py_file(index)
        try:
            refindex.h5py_file(server.url("missing.json"))
        except refindex.errors.SourceError as e:
            missing = str(e)
        print(json.dumps({{"waited": waited, "requests": server.requests[:2], "units": f["data"].attrs["units"],
                          "sum": int(f["data"][()].sum()), "missing": missing}}))
        f.close()
""")


def test_the_index_is_requested_before_the_road_loads_its_modules(tmp_path):
    """A JSON index at an HTTP(S) URL is requested first, in a thread, and the modules that read it
    load while it travels (~25 ms of an open): a child process holds back the block cache's module
    until the server has the index's request (without the early request it would wait in vain).
    The values are h5py's; a missing index fails as before."""
    _chunked(tmp_path / "data.h5")
    with webserver.serve() as server:
        url = server.put("data.h5", (tmp_path / "data.h5").read_bytes(), mtime=1_700_000_000)
        (tmp_path / "data.json").write_text(json.dumps(refindex.scan(url)))
    child = gated("refindex.source._cache", ("GET", "/data.json"),
                  EARLY.format(path=str(tmp_path / "data.h5"), index=str(tmp_path / "data.json"), scanned=url))
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["waited"] == [True], got
    assert [r[:2] for r in got["requests"]] == [["GET", "/data.json"], ["HEAD", "/data.h5"]]
    with h5py.File(tmp_path / "data.h5", "r") as h:
        assert got["units"] == h["data"].attrs["units"] and got["sum"] == int(h["data"][()].sum())
    assert "index not found" in got["missing"]


SCAN_EARLY = textwrap.dedent("""
    with webserver.serve() as server:
        url = server.put("data.h5", open({path!r}, "rb").read(), mtime=1_700_000_000)
        server.requests = Seen()
        f = refindex.h5py_file(url, cache={cache!r})
        first = list(server.requests)
        values = {{"units": f["data"].attrs["units"], "sum": int(f["data"][()].sum())}}
        f.close()
        server.requests.clear()
        again = refindex.h5py_file(url, cache={cache!r})  # from the cache: its freshness check only
        values["again"] = int(again["data"][()].sum())
        again.close()
        cached = [r for r in server.requests if r[2] is None]
        try:
            refindex.h5py_file(server.url("missing.h5"), cache=False)
        except refindex.errors.SourceError as e:
            missing = str(e)
        print(json.dumps({{"waited": waited, "first": first, "cached": cached, "missing": missing, **values}}))
""")


def test_a_scan_on_the_fly_asks_for_its_first_round_trip_before_the_scanner_loads(tmp_path):
    """h5py_file on an HDF5 URL the cache does not hold sends the scan's first round trip (the
    file's info, head and tail) before it loads the scanner (~40 ms of an open): a child process
    holds back ``refindex.pipeline`` until the server has that request (without the early request
    it would wait in vain).  The scan takes it (each asked for once); the values are h5py's; a
    cached index is only checked (nothing asked ahead); a missing file fails as before."""
    _chunked(tmp_path / "data.h5")
    child = gated("refindex.pipeline", ("HEAD", "/data.h5"),
                  SCAN_EARLY.format(path=str(tmp_path / "data.h5"), cache=str(tmp_path / "cache")))
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["waited"] == [True], got
    size = (tmp_path / "data.h5").stat().st_size
    ends = sorted(r[2] for r in got["first"][:3] if r[0] == "GET")
    assert [r[0] for r in got["first"][:3]].count("HEAD") == 1 and ends == ["bytes=-1114112", "bytes=0-1048575"]
    assert [r[:2] for r in got["first"]].count(["HEAD", "/data.h5"]) == 1, got["first"]  # taken, not asked again
    assert len(got["first"]) == 3 or size > (1 << 20), got["first"]  # a small file: nothing more to read
    assert got["cached"] == [["HEAD", "/data.h5", None]], got["cached"]
    with h5py.File(tmp_path / "data.h5", "r") as h:
        assert got["units"] == h["data"].attrs["units"]
        assert got["sum"] == got["again"] == int(h["data"][()].sum())
    assert "not found" in got["missing"].lower(), got["missing"]


NWB_EARLY = textwrap.dedent("""
    import warnings
    warnings.simplefilter("ignore")
    with webserver.serve() as server:
        url = server.put("base.nwb", open({path!r}, "rb").read(), mtime=1_700_000_000)
        text = open({index!r}).read().replace({scanned!r}, url)  # the index names this server's copy
        target = server.put("base.json", text.encode()) if {indexed!r} else url
        server.requests = Seen()
        nwb = refindex.open_nwb(target, cache=False)
        print(json.dumps({{"waited": waited, "first": server.requests[:3], "identifier": nwb.identifier,
                          "description": nwb.session_description, "n": len(server.requests)}}))
""")


@pytest.mark.parametrize("indexed", [False, True], ids=["on the fly", "index URL"])
def test_open_nwb_sends_its_first_request_before_the_rest_loads(tmp_path, indexed):
    """open_nwb starts as h5py_file does: a JSON index's request (or, for an NWB URL, its scan's first
    round trip) goes out before the modules that read (scan) it load (a child process holds one of
    them back until the server has the request: without it, it would wait in vain); the NWBFile is pynwb's."""
    pynwb = pytest.importorskip("pynwb")
    import nwbfiles

    nwbfiles.build_base(tmp_path / "base.nwb")
    with webserver.serve() as server:
        url = server.put("base.nwb", (tmp_path / "base.nwb").read_bytes(), mtime=1_700_000_000)
        (tmp_path / "base.json").write_text(json.dumps(refindex.scan(url)))
    # (open_nwb's own module loads the block cache: what loads after its first step is the road's open)
    held, request = (("refindex.read.h5py_road._open", ("GET", "/base.json")) if indexed
                     else ("refindex.pipeline", ("HEAD", "/base.nwb")))
    child = gated(held, request, NWB_EARLY.format(path=str(tmp_path / "base.nwb"), index=str(tmp_path / "base.json"),
                                                  scanned=url, indexed=indexed))
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # (the scan's first round trip is three requests side by side: they reach the server in any order)
    assert got["waited"] == [True] and list(request) in [r[:2] for r in got["first"]], got
    with pynwb.NWBHDF5IO(str(tmp_path / "base.nwb"), "r") as io:
        want = io.read()
        assert (got["identifier"], got["description"]) == (want.identifier, want.session_description)


def test_a_small_file_opens_on_the_fly_without_aiohttp(tmp_path):
    """h5py_file on an HDF5 URL scans it first: a small file's scan needs few requests, all made
    without aiohttp; the values read equal h5py's."""
    _chunked(tmp_path / "data.h5")
    with webserver.serve() as server:
        url = server.put("data.h5", (tmp_path / "data.h5").read_bytes(), mtime=1_700_000_000)
        child = CHILD.replace("refindex.h5py_file(sys.argv[1])", "refindex.h5py_file(sys.argv[1], cache=False)")
        out = subprocess.run([sys.executable, "-c", child, url], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        assert not got["aiohttp"]
        with h5py.File(tmp_path / "data.h5", "r") as h:
            assert got["sum"] == int(h["data"][()].sum()) and got["units"] == h["data"].attrs["units"]


def test_the_h5py_roads_fetcher_reads_few_ranges_itself_and_many_through_fsspec(monkeypatch):
    from refindex.source import RangeFetcher

    batches = []
    real = QuickHTTP.for_many
    monkeypatch.setattr(QuickHTTP, "for_many", lambda self, n, nbytes=0: batches.append(n) or real(self, n, nbytes))
    big = bytes(np.random.default_rng(3).integers(0, 256, 3 << 20, dtype=np.uint8))
    with webserver.serve() as server:
        url = server.put("big.bin", big)
        fetcher = RangeFetcher(url)
        try:
            few = [(0, 100), (5000, 9000)]
            many = [(i * 60_000, i * 60_000 + 1000) for i in range(40)]
            whole = [(0, len(big))]  # one range of 3 MiB, waited for: fetched in 12 parts side by side
            for ranges in (few, many, whole):
                assert fetcher.fetch(ranges) == [big[a:b] for a, b in ranges]
        finally:
            fetcher.close()
    assert batches == [2, 40, 12]


def test_each_range_of_a_batch_is_served_when_its_own_request_arrives(tmp_path):
    """The h5py road's read-ahead asks for a window of chunks in one round trip; libhdf5 decodes
    the first while the others travel, so each range has its own future, done with its request."""
    import threading

    from refindex.source import RangeFetcher

    big = bytes(np.random.default_rng(4).integers(0, 256, 3 << 20, dtype=np.uint8))
    ranges = [(0, 300_000), (300_000, 310_000), (2_000_000, 2_600_000)]  # the first two share a request
    with webserver.serve() as server:
        url = server.put("big.bin", big)
        server.held[("big.bin", 2_000_000)] = go = threading.Event()
        fetcher = RangeFetcher(url)
        try:
            futures = fetcher.start_each(ranges)
            assert [bytes(f.result(timeout=20)) for f in futures[:2]] == [big[a:b] for a, b in ranges[:2]]
            assert not futures[2].done()  # held by the server: the others did not wait for it
            assert fetcher.stats.round_trips == 0  # the round trip ends with its last request
            go.set()
            assert bytes(futures[2].result(timeout=20)) == big[2_000_000:2_600_000]
            assert (fetcher.stats.round_trips, fetcher.stats.requests) == (1, 2)
            assert fetcher.stats.bytes_fetched == 310_000 + 600_000
        finally:
            go.set()
            fetcher.close()
    (tmp_path / "big.bin").write_bytes(big)
    local = RangeFetcher(str(tmp_path / "big.bin"))
    try:
        assert [bytes(f.result()) for f in local.start_each(ranges)] == [big[a:b] for a, b in ranges]
        assert local.start_each([]) == []
    finally:
        local.close()


def test_fetchers_of_many_open_files_share_one_pool_of_threads():
    """A script that reads ahead in a hundred files it never closes keeps a bounded number of
    threads; a forked child (multiprocessing, Dask) fetches with threads of its own."""
    import os
    import threading

    from refindex.source import RangeFetcher
    from refindex.source._fetch import SIDE_BY_SIDE

    big = bytes(np.random.default_rng(5).integers(0, 256, 1 << 20, dtype=np.uint8))
    ranges = [(i << 16, (i << 16) + 40_000) for i in range(16)]  # sixteen requests each
    with webserver.serve() as server:
        url = server.put("big.bin", big)
        fetchers = [RangeFetcher(url) for _ in range(100)]
        batches = [f.start_each(ranges) for f in fetchers]
        for futures in batches:
            assert [bytes(x.result(timeout=30)) for x in futures] == [big[a:b] for a, b in ranges]
        ours = [t for t in threading.enumerate() if t.name.startswith("refindex-fetch")]
        assert 0 < len(ours) <= SIDE_BY_SIDE
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                got = [bytes(x.result(timeout=30)) for x in RangeFetcher(url).start_each(ranges)]
                code = 0 if got == [big[a:b] for a, b in ranges] else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def test_connections_the_server_let_go_while_idle_are_replaced():
    """Servers close kept connections that wait too long.  Every kept one is then stale: a request
    must not fail on the second either (a HEAD that failed so fell back to GET, whose answer had
    no ETag: the index then recorded no validator, and every freshness check read 48 ranges)."""
    with webserver.serve(idle=0.2) as server:
        url = server.put("f.bin", DATA)
        quick = QuickHTTP()
        starts = list(range(0, 8000, 1000))
        assert quick.cat_ranges([url] * 8, starts, [s + 10 for s in starts]) == [DATA[s:s + 10] for s in starts]
        assert until(lambda: server.connections == 0, 10)  # the server closes every kept one after 0.2 s idle
        server.requests.clear()
        assert described(quick.info(url))["etag"]
        assert [r[0] for r in server.requests] == ["HEAD"]  # no fallback to GET
        assert quick.cat_ranges([url] * 8, starts, [s + 10 for s in starts]) == [DATA[s:s + 10] for s in starts]


def test_a_forked_process_does_not_share_the_parents_connections():
    """A worker forked after an open (batch, isolate) must not read answers from the parent's
    kept sockets: it makes its own connections, and the parent's still work."""
    import os

    with webserver.serve() as server:
        url = server.put("f.bin", DATA)
        quick = QuickHTTP()
        ranges = ([url] * 3, [0, 10, 20], [5, 15, 25])
        want = [DATA[0:5], DATA[10:15], DATA[20:25]]
        assert quick.cat_ranges(*ranges) == want  # three kept connections, the pool's threads started
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 only if its reads are right
            ok = all(quick.cat_file(url, a, a + 100) == DATA[a:a + 100] for a in range(0, 5000, 500))
            ok = ok and quick.cat_ranges(*ranges) == want
            os._exit(0 if ok else 1)
        ended: list[tuple[int, int]] = []  # (a child waiting for the parent's pool threads, which it has not, would hang)
        if not until(lambda: ended.append(os.waitpid(pid, os.WNOHANG)) or ended[-1][0], 10):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked process hung on the parent's thread pool")
        assert ended[-1][1] == 0
        assert quick.cat_file(url, 100, 200) == DATA[100:200]
        peers = {r[1] for r in server.requests}
        assert peers == {"/f.bin"}


HTTPS_CHILD = textwrap.dedent("""
    import gc, json, ssl, sys
    import refindex
    try:
        f = refindex.h5py_file(sys.argv[1])
    except refindex.RefindexError as e:
        print(json.dumps({"error": str(e)}))
        raise SystemExit(0)
    got = {"sum": int(f["data"][()].sum()), "units": f["data"].attrs["units"],
           "requests": f.refindex_file.stats.as_dict()["requests"]}
    # each TLS context loaded the trusted certificates; the kept connections hold theirs
    got["contexts"] = sum(1 for o in gc.get_objects() if isinstance(o, ssl.SSLContext))
    print(json.dumps(got))
""")


def test_https_connections_share_one_tls_context(tmp_path):
    """Over HTTPS every new connection would load the machine's trusted certificates again (45 ms for
    a 220 KB bundle): the open and its chunks read ahead side by side make one TLS context, once.
    Certificates are still checked: a server the client does not trust is refused by name."""
    import os

    _chunked(tmp_path / "data.h5")
    cert, key = webserver.self_signed(str(tmp_path))
    with webserver.serve(tls=(cert, key)) as server:
        url = server.put("data.h5", (tmp_path / "data.h5").read_bytes(), mtime=1_700_000_000)
        assert url.startswith("https://")
        trusting = {**os.environ, "SSL_CERT_FILE": cert}
        refs = subprocess.run([sys.executable, "-c", "import json, sys, refindex; "
                               "print(json.dumps(refindex.scan(sys.argv[1])))", url],
                              capture_output=True, text=True, timeout=120, env=trusting)
        assert refs.returncode == 0, refs.stderr[-3000:]
        index = server.put("data.json", refs.stdout.encode())
        out = subprocess.run([sys.executable, "-c", HTTPS_CHILD, index], capture_output=True, text=True,
                             timeout=120, env=trusting)
        assert out.returncode == 0, out.stderr[-3000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
        with h5py.File(tmp_path / "data.h5", "r") as h:
            assert (got["sum"], got["units"]) == (int(h["data"][()].sum()), h["data"].attrs["units"])
        assert got["requests"] >= 2 and got["contexts"] == 1, got  # chunks on connections side by side
        untrusting = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
        out = subprocess.run([sys.executable, "-c", HTTPS_CHILD, index], capture_output=True, text=True,
                             timeout=120, env=untrusting)
        assert out.returncode == 0, out.stderr[-3000:]
        said = json.loads(out.stdout.strip().splitlines()[-1])["error"]
        host = url.split("/")[2]
        assert said == (f"{index}: cannot connect to {host}: its TLS certificate is not trusted here (self-signed "
                        "certificate); if the server is the right one, point SSL_CERT_FILE at a certificate bundle "
                        "that holds its issuer"), said


def test_a_peek_sees_the_head_of_a_body_while_the_rest_is_on_its_way():
    """``cat_file_peeked`` shows the first bytes of a body (decoded, with the length the server
    announced) before the rest has come, and still returns the whole body; a failing peek changes nothing."""
    import threading

    big = bytes(np.random.default_rng(6).integers(0, 64, 300_000, dtype=np.uint8))
    with webserver.serve() as server:
        quick = QuickHTTP()
        for name, gz in (("plain.json", False), ("packed.json", True)):
            url = server.put(name, big, gzip=gz)
            go = threading.Event()
            server.paused[name] = (64 << 10, go)  # the rest is sent once the peek has seen the head
            seen: list[tuple[bytes, int | None]] = []

            def peek(head: bytes, length: int | None) -> None:
                seen.append((head, length))
                go.set()

            t0 = time.monotonic()
            assert quick.cat_file_peeked(url, peek) == big
            assert time.monotonic() - t0 < 10  # (the server waits up to 30 s for the peek)
            [(head, length)] = seen
            assert 0 < len(head) and big.startswith(head) and length == len(server.files[name].data)
            del server.paused[name]

            def fails(head: bytes, length: int | None) -> None:
                raise RuntimeError("a peek that fails")

            assert quick.cat_file_peeked(url, fails) == big


@pytest.mark.parametrize("ranges", [True, False], ids=["ranges", "no ranges"])
def test_scan_stats_count_each_byte_the_server_sent_once(tmp_path, capsys, ranges):
    """Issue 45: ``refindex scan URL --stats`` of a whole 10,048-byte file reported ``bytes_fetched: 20096``,
    read as each byte counted twice.  The count is the server's own: a scan asks for the file's first and
    last bytes in one round trip, before it knows the size, and of a small file each request brings all of
    it.  Requests and bytes equal what the server answered (its HEAD aside: ``requests`` counts reads);
    ``bytes_distinct`` says how many different bytes of the file that was: the whole file, once."""
    import warnings

    from refindex.cli import main as cli_main

    path = tmp_path / "small.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(1000, dtype="<i8"))
    size = path.stat().st_size
    assert size == 10_048
    with webserver.serve(ranges=ranges) as server, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a server without ranges is warned about: test_no_ranges)
        url = server.put("small.h5", path.read_bytes())
        assert cli_main(["scan", url, "-o", str(tmp_path / "small.json"), "--stats", "--no-isolate"]) == 0
    stats = json.loads(capsys.readouterr().out)
    sent = [n for _, _, n in server.sent]
    assert stats["bytes_fetched"] == sum(sent) and stats["requests"] == len(sent)
    assert stats["bytes_distinct"] == size
    # head and tail, each the whole file (and, from a server without ranges, the byte that tells it so)
    assert sent == [size] * (2 if ranges else 3)
