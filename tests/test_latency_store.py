"""benchmarks/latency_store.py: the loopback object store every remote benchmark (P2-P4, P8) reads through.

Its answers and counts are what benchmarks report (requests, bytes per reader), so each kind of
request is checked against the file's bytes and the counts it must leave: ranges (open-ended and
suffix ones too), whole files, HEAD with its ETag, refusals (416, 404, outside the folder), the
counts endpoint (neither counted nor delayed), keep-alive, the latency before the headers and the
pacing of bodies; and fsspec's http filesystem reading through it, concurrently.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_latency_store", ROOT / "benchmarks" / "latency_store.py")
latency_store = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = latency_store  # dataclasses and typing look their module up
_spec.loader.exec_module(latency_store)  # imports nothing of benchmarks/: no sys.path change


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("store")
    data = np.random.default_rng(3).integers(0, 256, 600_000, dtype=np.uint8).tobytes()
    (d / "blob.bin").write_bytes(data)
    (d / "sub").mkdir()
    (tmp_path_factory.getbasetemp() / "outside.bin").write_bytes(b"secret")
    return d, data


def _ask(conn: http.client.HTTPConnection, method: str, path: str, **headers: str) -> tuple[int, dict, bytes]:
    conn.request(method, path, headers=headers)
    r = conn.getresponse()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()


def test_answers_and_counts(folder):
    d, data = folder
    n = len(data)
    with latency_store.LatencyStore(d, latency=0.0, bandwidth=0) as store:
        conn = http.client.HTTPConnection("127.0.0.1", int(store.base.rsplit(":", 1)[1]), timeout=10)
        cases = [  # (path, Range, status, first byte served, end)
            ("/blob.bin", "bytes=10-19", 206, 10, 20),
            ("/blob.bin", "bytes=599990-", 206, 599990, n),
            ("/blob.bin", "bytes=-7", 206, n - 7, n),
            ("/blob.bin", "bytes=100-9999999", 206, 100, n),
            ("/blob.bin", "bytes=200000-299999", 206, 200000, 300000),  # longer than a small body
            ("/blob.bin", None, 200, 0, n),
            ("/blob.bin?x=1", "bytes=0-3", 206, 0, 4),
            ("/blob.bin", f"bytes={n}-", 416, 0, 0),
            ("/blob.bin", "bytes=5-2", 416, 0, 0),
            ("/blob.bin", "bytes=-", 416, 0, 0),
            ("/blob.bin", "bytes=0-1,5-6", 416, 0, 0),
            ("/missing.bin", None, 404, 0, 0),
            ("/sub", None, 404, 0, 0),
            ("/../outside.bin", None, 404, 0, 0),
        ]
        sent = 0
        for path, rng, status, lo, hi in cases:  # all on one keep-alive connection
            got_status, headers, got = _ask(conn, "GET", path, **({"Range": rng} if rng else {}))
            assert (got_status, got) == (status, data[lo:hi]), (path, rng)
            assert int(headers["content-length"]) == hi - lo
            if status == 206:
                assert headers["content-range"] == f"bytes {lo}-{hi - 1}/{n}"
            sent += hi - lo
        status, headers, body = _ask(conn, "HEAD", "/blob.bin")
        st = os.stat(d / "blob.bin")
        assert (status, body, headers["content-length"], headers["accept-ranges"]) == (200, b"", str(n), "bytes")
        assert headers["etag"] == f'"{int(st.st_mtime)}-{n}"'
        assert _ask(conn, "HEAD", "/missing.bin")[0] == 404
        counts = {"requests": len(cases) + 2, "head_requests": 2, "bytes": sent}
        assert store.counts() == counts
        status, _, body = _ask(conn, "GET", latency_store.COUNTS_PATH)
        assert (status, json.loads(body)) == (200, counts)  # not counted itself
        assert latency_store.fetch_counts(store.counts_url) == counts
        store.reset()
        assert store.counts() == {"requests": 0, "head_requests": 0, "bytes": 0}
        conn.close()


def test_latency_and_pacing(folder):
    d, data = folder
    with latency_store.LatencyStore(d, latency=0.05, bandwidth=5e6) as store:
        conn = http.client.HTTPConnection("127.0.0.1", int(store.base.rsplit(":", 1)[1]), timeout=10)
        for rng, least in (("bytes=0-99", 0.05), ("bytes=0-499999", 0.05 + 0.1)):  # 500 KB at 5 MB/s: 0.1 s
            t0 = time.perf_counter()
            conn.request("GET", "/blob.bin", headers={"Range": rng})
            r = conn.getresponse()
            assert time.perf_counter() - t0 >= 0.05  # the round trip comes before the headers
            assert r.read() == data[: int(rng.split("-")[1]) + 1]
            assert time.perf_counter() - t0 >= least
        assert latency_store.fetch_counts(store.counts_url)["requests"] == 2
        assert store.counts()["bytes"] == 500_100
        conn.close()


def test_fsspec_reads_concurrently_through_it(folder):
    import fsspec

    d, data = folder
    with latency_store.LatencyStore(d, latency=0.05, bandwidth=50e6) as store:
        fs = fsspec.filesystem("http", skip_instance_cache=True, **latency_store.http_storage_options())
        url = store.url("blob.bin")
        assert fs.info(url)["size"] == len(data)
        starts = list(range(0, 400_000, 5_000))
        t0 = time.perf_counter()
        got = fs.cat_ranges([url] * len(starts), starts, [s + 100 for s in starts])
        took = time.perf_counter() - t0
        assert got == [data[s:s + 100] for s in starts]
        assert store.counts() == {"requests": 1 + len(starts), "head_requests": 1, "bytes": 100 * len(starts)}
        assert took < 0.05 * len(starts)  # side by side: one round trip after another takes at least this
