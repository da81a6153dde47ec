"""benchmarks/latency_store.py: the loopback object store every remote benchmark (P2-P4, P8) reads through.

Its answers and counts are what benchmarks report (requests, bytes per reader), so each kind of
request is checked against the file's bytes and the counts it must leave: ranges (open-ended and
suffix ones too), whole files, HEAD with its ETag, refusals (416, 404, outside the folder), the
counts endpoint (neither counted nor delayed), keep-alive, the latency before the headers and the
pacing of bodies; and fsspec's http filesystem reading through it, concurrently; and its S3 face (s3fs
listing, stating and reading it as a bucket).
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


def test_s3fs_lists_states_and_reads_it_as_a_bucket(tmp_path):
    """The archive benchmark's S3 store: a listing is one request per 1,000 keys, with each key's size,
    ETag and Last-Modified equal to what HEAD says; deeper keys roll into common prefixes under a
    delimiter; ranged reads return the file's bytes."""
    import s3fs

    for i in range(1005):
        (tmp_path / f"f{i:04d}.nc").write_bytes(b"x" * (i % 7 + 1))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.nc").write_bytes(b"0123456789")
    with latency_store.LatencyStore(tmp_path, latency=0.0, bandwidth=0, bucket="archive") as store:
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **store.s3_options())
        listed = fs.ls("archive", detail=True)
        assert store.counts() == {"requests": 2, "head_requests": 0, "bytes": store.counts()["bytes"]}  # 2 pages
        files = {e["name"]: e for e in listed if e["type"] == "file"}
        assert sorted(files) == [f"archive/f{i:04d}.nc" for i in range(1005)]
        assert [e["name"] for e in listed if e["type"] == "directory"] == ["archive/sub"]
        assert all(e["size"] == int(e["name"][-7:-3]) % 7 + 1 for e in files.values())
        assert store.s3_url("sub/deep.nc") == "s3://archive/sub/deep.nc"
        assert fs.find("archive/sub") == ["archive/sub/deep.nc"]
        assert fs.glob("archive/f100*.nc") == [f"archive/f100{i}.nc" for i in range(5)]
        fs.invalidate_cache()
        head = fs.info("archive/f0003.nc")  # a HEAD: the same identity as the listing's entry
        assert store.counts()["head_requests"] == 1
        assert (head["size"], head["ETag"], head["LastModified"]) == (
            files["archive/f0003.nc"]["size"], files["archive/f0003.nc"]["ETag"],
            files["archive/f0003.nc"]["LastModified"])
        assert fs.cat_file("archive/sub/deep.nc", start=2, end=5) == b"234"
        with pytest.raises(FileNotFoundError):
            fs.info("archive/missing.nc")
        import hashlib

        fs.pipe_file("archive/out/i.json", b"an index")  # PutObject: the file, with S3's ETag (its MD5)
        assert (tmp_path / "out" / "i.json").read_bytes() == b"an index"
        fs.invalidate_cache()
        assert fs.ls("archive/out", detail=True)[0]["ETag"] == f'"{hashlib.md5(b"an index").hexdigest()}"'
        os.replace(tmp_path / "out" / "i.json", tmp_path / "i.json")  # a copy put back: another inode...
        (tmp_path / "out" / "i.json").write_bytes((tmp_path / "i.json").read_bytes())
        fs.invalidate_cache()
        assert fs.info("archive/out/i.json")["ETag"] != f'"{hashlib.md5(b"an index").hexdigest()}"'
        assert store.adopt(tmp_path / "out") == 1  # ...adopted as written by PUT
        fs.invalidate_cache()
        assert fs.info("archive/out/i.json")["ETag"] == f'"{hashlib.md5(b"an index").hexdigest()}"'
