"""Indexes you did not make (issue #13, part 5): an index names only URLs its reader may fetch.

A crafted index served over HTTP from a loopback server names a local file outside it,
the cloud metadata endpoint, a private-network host and the tricky spellings of those;
``refindex.open`` refuses each before any request (the server sees only the index being
fetched, and addresses that would hang if connected to return at once), naming the key
and the URL; the same index opens with ``allowed_urls`` / ``trust=True``.  Legitimate
indexes (local beside or elsewhere, dicts, s3 on moto, HTTP on the index's own host, NWB
with external links, parquet) open unchanged.
"""

from __future__ import annotations

import copy
import json
import socket
import time
import warnings
from pathlib import Path

import fsspec
import h5py
import numpy as np
import pytest

import refindex
from refindex.read import ExternalIndexes, ReadOptions, UrlPolicy

import nwbcompare  # noqa: E402  (tests/ is on sys.path under pytest)
import nwbfiles  # noqa: E402
import webserver
from conftest import moto_s3

pytestmark = pytest.mark.timeout(120)

VALUES = np.arange(4000, dtype="<f8")
SECRET = np.arange(1000, dtype="<f8")[::-1].copy()  # a chunk's worth of bytes, recognisable


def _log(site) -> list[tuple[str, str]]:
    """(method, path) of every request the site's server has answered since it was last cleared."""
    return [(method, path) for method, path, _ in site["server"].requests]


def _write_data(path: Path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=VALUES, chunks=(1000,))  # 4 uncompressed chunks of 8000 bytes


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A loopback HTTP server holding data.h5 and its index (chunks on that same server)."""
    folder = tmp_path_factory.mktemp("site")
    _write_data(folder / "data.h5")
    secret = tmp_path_factory.mktemp("elsewhere") / "secret.bin"
    secret.write_bytes(SECRET.tobytes())
    with webserver.serve(etag=False, last_modified=False) as server:
        refs = json.loads(json.dumps(refindex.scan(str(folder / "data.h5"), url=server.url("data.h5"),
                                                   inline_threshold=0, inline_dataset_threshold=0)))
        server.put("data.h5", (folder / "data.h5").read_bytes())
        server.put("index.json", json.dumps(refs).encode())
        yield {"server": server, "base": server.base, "refs": refs, "secret": secret, "folder": folder}


def _serve(site, refs, name="evil.json") -> str:
    site["server"].put(name, json.dumps(refs).encode())
    site["server"].requests.clear()
    return f"{site['base']}/{name}"


def _with_chunk(refs, key: str, url: str, size: int = 8000):
    out = copy.deepcopy(refs)
    out["refs"][key] = [url, 0, size]
    return out


def _only_the_index_was_fetched(site, name="evil.json"):
    assert _log(site) == [("GET", "/" + name)], _log(site)


HOSTILE = [
    "{secret}",  # a local file outside the index (bare path)
    "file://{secret}",
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://10.0.0.1/x.h5",
    "http://192.168.1.1/x.h5",
    "http://172.16.5.4:9000/x.h5",
    "http://2852039166/latest/meta-data/",  # 169.254.169.254 as one decimal number
    "http://0xa9fea9fe/latest/meta-data/",  # ... in hex
    "http://0251.0376.0251.0376/latest/",  # ... in octal
    "http://[::ffff:169.254.169.254]/latest/",  # IPv4-mapped IPv6
    "http://[::ffff:a9fe:a9fe]/latest/",
    "http://[fe80::1]/x",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://localhost:9/x.h5",  # loopback by name, not the index's own host as written
    "~/.aws/credentials",
    "simplecache::{base}/data.h5",  # chained, even to the index's own host
    "ftp://10.0.0.1/x.h5",
]


@pytest.mark.timeout(30)  # a fetch of the unroutable addresses would hang far longer
@pytest.mark.parametrize("pattern", HOSTILE)
def test_crafted_remote_index_is_refused_before_any_request(site, pattern):
    url = pattern.format(secret=site["secret"], base=site["base"])
    index = _serve(site, _with_chunk(site["refs"], "x/2", url))
    start = time.monotonic()
    with pytest.raises(refindex.UntrustedReference) as caught:
        refindex.open(index)
    assert time.monotonic() - start < 10
    err = caught.value
    assert err.key == "x/2" and err.url == url and err.uses == 1
    assert "'x/2'" in str(err) and url in str(err) and "allowed_urls" in str(err) and "trust=True" in str(err)
    assert str(err).startswith(index)  # names the index too
    _only_the_index_was_fetched(site)


def test_refusal_counts_the_keys_naming_a_url(site):
    refs = copy.deepcopy(site["refs"])
    for k in ("x/1", "x/3"):
        refs["refs"][k] = ["http://10.1.2.3/x.h5", 0, 8000]
    with pytest.raises(refindex.UntrustedReference, match=r"key 'x/1' \(and 1 more naming the same URL\)") as caught:
        refindex.open(_serve(site, refs))
    assert caught.value.uses == 2


def test_a_template_naming_a_local_file_is_refused(site):
    refs = copy.deepcopy(site["refs"])
    refs["templates"]["u"] = "file://" + str(site["secret"])
    with pytest.raises(refindex.UntrustedReference, match=r"templates\['u'\] points at file://.*a local file, "
                                                          "named by a remote index"):
        refindex.open(_serve(site, refs))
    _only_the_index_was_fetched(site)


def test_the_provenance_source_is_judged_before_the_freshness_check_asks_it(site):
    refs = copy.deepcopy(site["refs"])
    refs["refindex"]["source"]["url"] = "http://169.254.169.254/latest/meta-data/"
    with pytest.raises(refindex.UntrustedReference, match="refindex.source.url points at http://169.254.169.254"):
        refindex.open(_serve(site, refs))
    _only_the_index_was_fetched(site)


def test_the_same_index_opens_when_allowed(site):
    secret = site["secret"]
    index = _serve(site, _with_chunk(site["refs"], "x/2", str(secret)))
    for allowance in ({"allowed_urls": [str(secret)]}, {"allowed_urls": [str(secret.parent) + "/*"]},
                      {"trust": True}):
        root = refindex.open(index, **allowance)
        got = root["x"][...]
        assert np.array_equal(got[2000:3000], SECRET) and np.array_equal(got[:2000], VALUES[:2000])
    for pattern in HOSTILE[2:]:  # opening fetches no chunk, so these need no network
        url = pattern.format(secret=secret, base=site["base"])
        index = _serve(site, _with_chunk(site["refs"], "x/2", url))
        assert refindex.open(index, allowed_urls=[url])["x"].shape == (4000,)
        assert refindex.open(index, trust=True)["x"].shape == (4000,)
        assert {p for _, p in _log(site)} <= {"/evil.json", "/data.h5"}  # data.h5: freshness checks


def test_a_name_resolving_to_the_metadata_address_is_refused(site, monkeypatch):
    real = socket.getaddrinfo

    def fake(host, *args, **kwargs):
        if host == "innocent.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 0))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    index = _serve(site, _with_chunk(site["refs"], "x/0", "http://innocent.example/x.h5"))
    with pytest.raises(refindex.UntrustedReference, match="innocent.example resolves to 169.254.169.254"):
        refindex.open(index)
    _only_the_index_was_fetched(site)


def test_the_remote_index_reads_its_own_host(site):
    site["server"].requests.clear()
    root = refindex.open(f"{site['base']}/index.json")
    assert np.array_equal(root["x"][...], VALUES)
    assert ("GET", "/index.json") in _log(site) and any(p == "/data.h5" for _, p in _log(site))


# ---------------------------------------------------------------- local indexes


def _local_index(folder: Path, refs, name="index.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(refs))
    return path


def test_local_index_escapes_are_refused(tmp_path):
    data = tmp_path / "idx" / "data.h5"
    data.parent.mkdir()
    _write_data(data)
    refs = json.loads(json.dumps(refindex.scan(str(data), inline_threshold=0, inline_dataset_threshold=0)))
    (tmp_path / "outside.bin").write_bytes(SECRET.tobytes())
    hidden = tmp_path / "idx" / ".aws"
    hidden.mkdir()
    (hidden / "credentials").write_bytes(SECRET.tobytes())
    (tmp_path / "idx" / "beside.bin").write_bytes(SECRET.tobytes())
    (tmp_path / "idx" / "link.bin").symlink_to(tmp_path / "outside.bin")
    escapes = [str(tmp_path / "idx" / ".." / "outside.bin"), "file://" + str(tmp_path / "outside.bin"),
               str(hidden / "credentials"), str(tmp_path / "idx" / "link.bin"), "/etc/passwd",
               "http://169.254.169.254/latest/", "http://2852039166/", "~/.aws/credentials"]
    for i, url in enumerate(escapes):
        index = _local_index(tmp_path / "idx", _with_chunk(refs, "x/1", url), f"i{i}.json")
        with pytest.raises(refindex.UntrustedReference, match="'x/1'") as caught:
            refindex.open(str(index))
        assert caught.value.url == url
    index = _local_index(tmp_path / "idx", _with_chunk(refs, "x/1", str(tmp_path / "idx" / "beside.bin")))
    assert np.array_equal(refindex.open(str(index))["x"][1000:2000], SECRET)  # beside the index: fine
    index = _local_index(tmp_path / "idx", _with_chunk(refs, "x/1", str(tmp_path / "outside.bin")))
    allowed = refindex.open(str(index), allowed_urls=[str(tmp_path / "outside.bin")])
    assert np.array_equal(allowed["x"][1000:2000], SECRET)
    # a local index may name hosts on the reader's own network (its own data servers), when it
    # declares them; never the metadata endpoint
    own = _with_chunk(refs, "x/1", "{{u1}}")
    own["templates"]["u1"] = "http://10.0.0.1/x.h5"
    assert refindex.open(str(_local_index(tmp_path / "idx", own)))["x"].shape == (4000,)
    with pytest.raises(refindex.UntrustedReference, match="not at or beside any source the index declares"):
        refindex.open(str(_local_index(tmp_path / "idx", _with_chunk(refs, "x/1", "http://10.0.0.1/x.h5"))))
    own["templates"]["u1"] = "http://169.254.169.254/x.h5"
    with pytest.raises(refindex.UntrustedReference, match="link-local or cloud metadata"):
        refindex.open(str(_local_index(tmp_path / "idx", own)))


def test_a_dict_in_memory_reads_hdf5_files_and_files_beside_them(tmp_path):
    data = tmp_path / "d" / "data.h5"
    data.parent.mkdir()
    _write_data(data)
    refs = json.loads(json.dumps(refindex.scan(str(data), inline_threshold=0, inline_dataset_threshold=0)))
    (tmp_path / "d" / "raw.bin").write_bytes(SECRET.tobytes())
    (tmp_path / "else.bin").write_bytes(SECRET.tobytes())
    assert np.array_equal(refindex.open(_with_chunk(refs, "x/0", str(tmp_path / "d" / "raw.bin")))["x"][:1000], SECRET)
    with pytest.raises(refindex.UntrustedReference, match="neither an HDF5 file nor beside one"):
        refindex.open(_with_chunk(refs, "x/0", str(tmp_path / "else.bin")))
    with pytest.raises(refindex.UntrustedReference, match="not at or beside any source the index declares"):
        refindex.open(_with_chunk(refs, "x/0", "s3://someone-elses-bucket/secret.h5"))
    # the policy object itself, for services that judge URLs up front
    policy = UrlPolicy("https://example.org/indexes/x.json")
    assert policy.refusal("https://example.org/data/x.h5") is None
    assert "remote index" in policy.refusal("/etc/passwd")
    assert "metadata" in policy.refusal("http://[64:ff9b::a9fe:a9fe]/")
    # allowances are matched after .. and symlinks are resolved, as the readers will resolve them
    wide = UrlPolicy("https://example.org/x.json", allowed=["http://10.0.0.1/open/"])
    assert wide.refusal("http://10.0.0.1/open/x.h5") is None
    assert "private-network" in wide.refusal("http://10.0.0.1/open/../closed/x.h5")
    (tmp_path / "d" / "escape").symlink_to(tmp_path / "else.bin")
    local = UrlPolicy(None, allowed=[str(tmp_path / "d") + "/"])
    assert local.refusal(str(tmp_path / "d" / "raw.bin")) is None
    for url in (str(tmp_path / "d" / ".." / "else.bin"), str(tmp_path / "d" / "escape")):
        assert "neither an HDF5 file" in local.refusal(url)


def test_legitimate_local_indexes_open_unchanged(tmp_path):
    data = tmp_path / "data" / "x.h5"
    data.parent.mkdir()
    _write_data(data)
    beside = tmp_path / "data" / "x.refs.json"
    refindex.scan_to_file(str(data), beside, inline_threshold=0, inline_dataset_threshold=0)
    elsewhere = tmp_path / "indexes" / "x.json"  # indexes in one folder, data in another
    elsewhere.parent.mkdir()
    refindex.scan_to_file(str(data), elsewhere, inline_threshold=0, inline_dataset_threshold=0)
    parquet = tmp_path / "indexes" / "x.parq"
    refindex.scan_to_parquet(str(data), parquet, inline_threshold=0, inline_dataset_threshold=0)
    for index in (beside, elsewhere, parquet):
        assert np.array_equal(refindex.open(str(index))["x"][...], VALUES)
    report = refindex.verify(str(data), str(elsewhere))
    assert report.ok, report.summary()


def test_verify_and_open_nwb_refuse_a_crafted_index(site):
    data = site["folder"] / "data.h5"
    for url in ("http://169.254.169.254/latest/", str(site["secret"])):
        index = _serve(site, _with_chunk(site["refs"], "x/2", url))
        with pytest.raises(refindex.UntrustedReference, match="'x/2'"):
            refindex.verify(str(data), index, check_source=False)
        _only_the_index_was_fetched(site)
        site["server"].requests.clear()
        with pytest.raises(refindex.UntrustedReference, match="'x/2'"):
            refindex.open_nwb(index)
        _only_the_index_was_fetched(site)
    report = refindex.verify(str(data), index, check_source=False, allowed_urls=[url])
    assert [r.status for r in report.results] == ["different"]  # it read the file it was allowed to


def test_cli_verify_refuses_and_allows(site, capsys):
    from refindex.cli import main

    url = "file://" + str(site["secret"])
    index = _serve(site, _with_chunk(site["refs"], "x/2", url))
    data = str(site["folder"] / "data.h5")
    assert main(["verify", data, index, "--no-check-source"]) == 2
    err = capsys.readouterr().err
    assert "x/2" in err and url in err and "--allow-url" in err
    assert main(["verify", data, index, "--no-check-source", "--allow-url", url]) == 1  # runs: x/2 differs
    assert "different" in capsys.readouterr().out
    assert main(["verify", data, index, "--no-check-source", "--trust"]) == 1


# ---------------------------------------------------------------- parquet: judged as records load


def test_parquet_records_are_judged_before_their_urls_are_read(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "data.h5"
    _write_data(data)
    out = tmp_path / "x.parq"
    refindex.scan_to_parquet(str(data), out, inline_threshold=0, inline_dataset_threshold=0, record_size=2)
    assert np.array_equal(refindex.open(str(out))["x"][...], VALUES)
    record = out / "x" / "refs.1.parq"  # chunks 2 and 3
    table = pq.read_table(record)
    paths = pa.array(["http://169.254.169.254/latest/", str(data)]).dictionary_encode()
    pq.write_table(table.set_column(0, "path", paths), record)
    root = refindex.open(str(out))  # the open reads no record
    assert np.array_equal(root["x"][:2000], VALUES[:2000])
    with pytest.raises(refindex.UntrustedReference, match="'x/2'.*169.254.169.254"):
        root["x"][2000:3000]  # would hang on the unroutable address if it were fetched
    allowed = refindex.open(str(out), allowed_urls=["http://169.254.169.254/"])
    assert np.array_equal(allowed["x"][3000:], VALUES[3000:])


# ---------------------------------------------------------------- object stores and NWB


def test_an_index_in_s3_reads_s3(tmp_path):
    data = tmp_path / "data.h5"
    _write_data(data)
    with moto_s3() as s3:
        fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3)
        fs.mkdir("policy-bucket")
        fs.put(str(data), "policy-bucket/data.h5")
        refs = refindex.scan("s3://policy-bucket/data.h5", storage_options=s3, inline_threshold=0,
                             inline_dataset_threshold=0)
        fs.pipe("policy-bucket/index.json", json.dumps(refs).encode())
        remote = dict(s3)
        root = refindex.open("s3://policy-bucket/index.json", storage_options=s3, remote_options=remote)
        assert np.array_equal(root["x"][...], VALUES)
        refs["refs"]["x/0"] = [str(data), 0, 8000]  # an index in a bucket naming a local file
        fs.pipe("policy-bucket/evil.json", json.dumps(refs).encode())
        with pytest.raises(refindex.UntrustedReference, match="a local file, named by a remote index"):
            refindex.open("s3://policy-bucket/evil.json", storage_options=s3, remote_options=remote)


@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    pytest.importorskip("pynwb")
    folder = tmp_path_factory.mktemp("linked")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return nwbfiles.build_all(folder)


def test_nwb_with_external_links_opens_unchanged(linked, tmp_path):
    import pynwb

    path = linked["linking"]
    out = tmp_path / "linking.refs.json"
    refindex.scan_to_file(str(path), out, follow_external=True)  # base.nwb's index written beside it
    followed = json.loads(json.dumps(refindex.scan(str(path), follow_external=True)))
    with pynwb.NWBHDF5IO(str(path), "r") as hio:
        hnwb = hio.read()
        for refs in (str(out), followed, json.loads(json.dumps(refindex.scan(str(path))))):
            nwbcompare.assert_same_nwb(hnwb, refindex.open_nwb(refs))


def test_links_into_files_the_index_may_not_name_are_refused(linked, tmp_path):
    refs = json.loads(json.dumps(refindex.scan(str(linked["linking"]))))
    cases = [{"url": "http://169.254.169.254/base.nwb"}, {"index": "http://169.254.169.254/base.json"},
             {"index": "../../../../../../etc/passwd"},
             {"refs": _with_chunk(json.loads(json.dumps(refindex.scan(str(linked["base"])))),
                                  "acquisition/shared_ts/data/0.0", "http://169.254.169.254/x")}]
    for entry in cases:
        crafted = copy.deepcopy(refs)
        crafted["refindex"]["external"] = {"base.nwb": entry}
        ext = ExternalIndexes(crafted, ReadOptions.of(index_url=str(tmp_path / "i.json")),
                              index_location=str(tmp_path / "i.json"))
        with pytest.raises(refindex.UntrustedReference):
            ext.store("base.nwb")
    ext = ExternalIndexes(refs, ReadOptions.of(), index_location=None)
    assert ext.store("base.nwb")  # scanned on the fly from the HDF5 file beside: trusted
