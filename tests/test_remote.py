"""Remote scans: HDF5 files in S3 (a real moto server on 127.0.0.1, reached with s3fs).

The index made from the S3 object must be the index of the local copy with only the
URL changed, values read through it (refindex's reader and the plain fsspec + zarr
path) must equal h5py's, request/byte counts must be reported, and credentials given
as storage options must never end up in the index.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import fsspec
import h5py
import numpy as np
import pytest
import zarr

import refindex
from refindex.errors import RefindexError
from refindex.cli import main as cli_main

from conftest import assert_same_values, moto_s3, zvalues

pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")

BUCKET = "refidx-bucket"  # must not contain the secret "test" (the index is checked for it)
KEY, SECRET = "test", "test"
RNG = np.random.default_rng(7)


def _build_plain(path: Path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("chunked", data=RNG.integers(0, 1000, (200, 150)).astype("<i4"),
                         chunks=(32, 64), compression="gzip")
        f.create_dataset("contiguous", data=RNG.standard_normal((300, 7)))
        f.create_dataset("strings", data=["alpha", "béta", "", "a much longer string " * 5],
                         dtype=h5py.string_dtype())
        g = f.create_group("group/nested")
        g.attrs["note"] = "hello"
        g.create_dataset("small", data=np.arange(5, dtype="<u2"))
        f.create_dataset("scalar_str", data="a scalar", dtype=h5py.string_dtype())


def _build_nwb(path: Path) -> None:
    pynwb = pytest.importorskip("pynwb")
    nwb = pynwb.NWBFile(session_description="remote test", identifier="remote-1",
                        session_start_time=datetime(2024, 1, 2, tzinfo=timezone.utc))
    nwb.add_acquisition(pynwb.TimeSeries(name="ts", data=RNG.standard_normal((500, 4)), unit="V", rate=10.0))
    with pynwb.NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)


FILES = {"plain.h5": _build_plain, "small.nwb": _build_nwb}


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A moto S3 server with the test files uploaded: yields (storage_options, local_dir)."""
    with moto_s3(KEY, SECRET) as opts:
        fs = s3fs.S3FileSystem(**opts)
        fs.mkdir(BUCKET)
        local = tmp_path_factory.mktemp("s3src")
        for name, build in FILES.items():
            build(local / name)
            fs.put(str(local / name), f"{BUCKET}/{name}")
        yield opts, local


def _remote(opts: dict) -> dict:
    return {k: v for k, v in opts.items() if k != "anon"}


def _datasets(path: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.dtype.kind in "iufSO" and obj.dtype.names is None:
                out[name] = obj[()]
        f.visititems(visit)
    return out


def _assert_values(group: zarr.Group, local: Path, convention_scalar_1d: bool) -> int:
    n = 0
    for name, h in _datasets(local).items():
        z = zvalues(group[name])
        h = np.asarray(h, dtype=object) if isinstance(h, (bytes, str)) else np.asarray(h)
        if convention_scalar_1d and h.shape == () and z.shape == (1,):
            z = z.reshape(())
        assert_same_values(h, z)
        n += 1
    return n


@pytest.mark.parametrize("name", sorted(FILES))
def test_s3_scan_equals_local_scan(s3, name):
    opts, local = s3
    url = f"s3://{BUCKET}/{name}"
    stats: dict = {}
    remote = refindex.scan(url, storage_options=opts, stats=stats)
    here = refindex.scan(str(local / name))
    assert remote["templates"] == {"u": url}
    assert here["templates"] == {"u": str(local / name)}
    # Same keys, same values: chunk references go through the "{{u}}" template.
    assert remote["refs"] == here["refs"]
    # (c) request/byte counts are reported and plausible
    size = (local / name).stat().st_size
    assert stats["requests"] >= 1
    # head and tail are asked for with the size, before it is known: a small file comes twice
    assert 0 < stats["bytes_fetched"] <= 2 * size
    assert remote["refindex"]["source"]["size"] == size
    assert remote["refindex"]["source"]["url"] == url


@pytest.mark.parametrize("name", sorted(FILES))
def test_s3_values_through_refs(s3, name):
    opts, local = s3
    url = f"s3://{BUCKET}/{name}"
    refs = json.loads(json.dumps(refindex.scan(url, storage_options=opts)))
    hdmf = name.endswith(".nwb")
    # refindex's reader
    g = refindex.open(refs, remote_options=_remote(opts))
    assert _assert_values(g, local / name, hdmf) >= 3
    # the plain consumer path: async reference FS over an async s3fs
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True, remote_protocol="s3",
                           remote_options={**_remote(opts), "asynchronous": True})
    g2 = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=2)
    assert _assert_values(g2, local / name, hdmf) >= 3


def test_s3_nwb_reads_back_with_pynwb(s3):
    pytest.importorskip("hdmf_zarr")
    opts, local = s3
    refs = refindex.scan(f"s3://{BUCKET}/small.nwb", storage_options=opts)
    nwb = refindex.open_nwb(refs, remote_options=_remote(opts))
    with h5py.File(local / "small.nwb", "r") as f:
        np.testing.assert_array_equal(nwb.acquisition["ts"].data[:], f["acquisition/ts/data"][()])
    assert nwb.identifier == "remote-1"


def test_secrets_never_written(s3, tmp_path):
    opts, _ = s3
    secret_opts = {**opts, "key": "AKIAREFINDEXSECRETKEY", "secret": "sEcReT/very+private=="}
    # moto accepts any credentials; the scan must succeed and the index must not carry them.
    for name in FILES:
        out = tmp_path / f"{name}.json"
        refindex.scan_to_file(f"s3://{BUCKET}/{name}", out, storage_options=secret_opts)
        text = out.read_text()
        for s in ("AKIAREFINDEXSECRETKEY", "sEcReT", "very+private", secret_opts["endpoint_url"]):
            assert s not in text


def test_cli_scan_s3(s3, tmp_path, capsys):
    opts, local = s3
    out = tmp_path / "cli.json"
    code = cli_main(["scan", f"s3://{BUCKET}/plain.h5", "--storage-options", json.dumps(opts),
                     "-o", str(out), "--stats"])
    assert code == 0
    captured = capsys.readouterr()
    stats = json.loads(captured.out)
    assert stats["requests"] >= 1
    assert 0 < stats["bytes_fetched"] <= 2 * (local / "plain.h5").stat().st_size  # head and tail: see above
    refs = json.loads(out.read_text())
    assert refs["templates"]["u"] == f"s3://{BUCKET}/plain.h5"
    g = refindex.open(str(out), remote_options=_remote(opts))
    with h5py.File(local / "plain.h5", "r") as f:
        np.testing.assert_array_equal(g["chunked"][:], f["chunked"][()])


def test_s3_missing_object_is_clear_error(s3):
    opts, _ = s3
    with pytest.raises(RefindexError):
        refindex.scan(f"s3://{BUCKET}/does-not-exist.h5", storage_options=opts)


def test_presigned_url_is_not_written_into_the_index(s3, tmp_path):
    """A presigned HTTPS URL (a credential that expires) is refused as the index's target
    unless the caller names the URL to record; with ``url=s3://...`` the index equals the S3 one."""
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config

    opts, local = s3
    client = boto3.client("s3", endpoint_url=opts["endpoint_url"], aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                          region_name="us-east-1", config=Config(signature_version="s3v4"))
    signed = client.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "plain.h5"},
                                           ExpiresIn=600)
    assert "X-Amz-Signature=" in signed
    signature = signed.split("X-Amz-Signature=")[1].split("&")[0]
    out = tmp_path / "signed.json"
    with pytest.raises(RefindexError, match="X-Amz-Signature") as err:
        refindex.scan_to_file(signed, out)
    assert signature not in str(err.value)  # the error does not print the credential either
    assert not out.exists()
    code = cli_main(["scan", signed, "-o", str(out)])
    assert code != 0 and not out.exists()

    # Read through the signed URL, record the durable one: same index as scanning s3:// directly.
    durable = f"s3://{BUCKET}/plain.h5"
    refs = refindex.scan(signed, url=durable)
    assert signature not in json.dumps(refs)
    assert refs["refs"] == refindex.scan(durable, storage_options=opts)["refs"]
    assert refs["templates"] == {"u": durable}
    g = refindex.open(json.loads(json.dumps(refs)), remote_options=_remote(opts))
    assert _assert_values(g, local / "plain.h5", False) >= 3


def test_signing_params_detection():
    from refindex.checks.safety import signing_params

    assert signing_params("https://b.s3.amazonaws.com/k.nwb?X-Amz-Algorithm=A&X-Amz-Credential=c&"
                          "X-Amz-Signature=s") == ["X-Amz-Signature", "X-Amz-Credential"]
    assert signing_params("https://acct.blob.core.windows.net/c/f.h5?sv=2024&se=2026&sig=abc") == ["sig", "sv", "se"]
    assert signing_params("https://storage.googleapis.com/b/f.h5?X-Goog-Signature=x") == ["X-Goog-Signature"]
    assert signing_params("https://d.cloudfront.net/f.h5?Expires=1&Signature=s&Key-Pair-Id=k") == ["Signature", "Key-Pair-Id"]
    # ordinary query strings and local paths are left alone
    assert signing_params("https://api.dandiarchive.org/api/assets/abc/download/") == []
    assert signing_params("https://example.org/data.h5?version=2") == []
    assert signing_params("/data/file.h5?sig=1&sv=2") == []


def test_virtual_dataset_in_s3(s3, tmp_path):
    """Sources beside a VDS in the same bucket are opened with the scan's storage options; where
    only libhdf5 could gather the values (it cannot open sources through fsspec) the scan fails
    instead of indexing fill values."""
    from test_vds import _chunked_sources, _vds

    opts, _ = s3
    names = _chunked_sources(tmp_path, n=2)
    aligned = _vds(tmp_path / "aligned.h5", names, (2, 10, 100), [0, 1])
    _vds(tmp_path / "unaligned.h5", names, (23, 100), [slice(3, 13), slice(13, 23)])
    fs = s3fs.S3FileSystem(**opts)
    for p in tmp_path.glob("*.h5"):
        fs.put(str(p), f"{BUCKET}/vds/{p.name}")
    refs = json.loads(json.dumps(refindex.scan(f"s3://{BUCKET}/vds/aligned.h5", storage_options=opts,
                                              inline_dataset_threshold=0)))
    g = refindex.open(refs, remote_options=_remote(opts))
    from refindex.read import notes

    assert "refindex_inlined" not in notes(refs, "vds") and "vds" in g
    assert_same_values(aligned, zvalues(g["vds"]))
    chunk_urls = {refs["templates"][v[0].strip("{}")] for k, v in refs["refs"].items()
                  if k.startswith("vds/") and isinstance(v, list)}
    assert chunk_urls == {f"s3://{BUCKET}/vds/{n}" for n in names}

    with pytest.raises(RefindexError, match="remote file") as err:
        refindex.scan(f"s3://{BUCKET}/vds/unaligned.h5", storage_options=opts)
    assert err.value.path == "/vds" and "unaligned.h5" in str(err.value)
    skipped = refindex.scan(f"s3://{BUCKET}/vds/unaligned.h5", storage_options=opts, on_unsupported="skip")
    assert "vds/.zarray" not in skipped["refs"]
    assert any("/vds" in str(s) for s in skipped["refindex"]["skipped"])


def test_external_storage_in_s3(s3, tmp_path, monkeypatch):
    """External raw storage beside a file in S3: one file by reference, several read through
    s3fs (libhdf5 would look for them in the working directory, here holding decoys)."""
    opts, _ = s3
    data = np.arange(200, dtype="<f8")
    (tmp_path / "one.bin").write_bytes(data.tobytes())
    (tmp_path / "p1.bin").write_bytes(data[:120].tobytes())
    (tmp_path / "p2.bin").write_bytes(data[120:].tobytes())
    with h5py.File(tmp_path / "single.h5", "w") as f:
        f.create_dataset("x", shape=(200,), dtype="<f8", external=[("one.bin", 0, 1600)])
    with h5py.File(tmp_path / "multi.h5", "w") as f:
        f.create_dataset("x", shape=(200,), dtype="<f8", external=[("p1.bin", 0, 960), ("p2.bin", 0, 640)])
    fs = s3fs.S3FileSystem(**opts)
    for p in tmp_path.glob("*"):
        fs.put(str(p), f"{BUCKET}/ext/{p.name}")
    decoys = tmp_path / "cwd"
    decoys.mkdir()
    for name in ("one.bin", "p1.bin", "p2.bin"):
        (decoys / name).write_bytes(b"\0" * 1600)
    monkeypatch.chdir(decoys)
    for name in ("single.h5", "multi.h5"):
        refs = json.loads(json.dumps(refindex.scan(f"s3://{BUCKET}/ext/{name}", storage_options=opts)))
        g = refindex.open(refs, remote_options=_remote(opts))
        assert_same_values(data, zvalues(g["x"]))


def test_an_index_in_s3_loads_in_one_get(s3, tmp_path):
    """Opening an index kept in a bucket is one GET: no HEAD first (s3fs asks an object's size before a
    whole-file read, to split a large one; a JSON index of kilobytes is read from offset 0 instead)."""
    from conftest import moto_requests

    opts, local = s3
    fs = s3fs.S3FileSystem(**opts)
    index = f"{BUCKET}/one-get/plain.h5.refs.json"
    fs.pipe_file(index, json.dumps(refindex.scan(f"s3://{BUCKET}/plain.h5", storage_options=opts)).encode())
    with moto_requests() as seen:
        g = refindex.open(f"s3://{index}", storage_options=opts, remote_options=_remote(opts), check_source=False)
        asked = list(seen.lines)
    assert [line for line in asked if "one-get" in line] == [f"GET /{index} HTTP/1.1"]
    assert _assert_values(g, local / "plain.h5", False) >= 3
