"""Clean failures and safe outputs: bad inputs, isolation, atomic writes, provenance, security."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import refindex
from refindex import pipeline, source as source_mod
from refindex.checks import safety
from refindex.options import ScanOptions
from refindex.testing import selftest
from refindex.cli import main as cli_main
from refindex.errors import (NotHDF5Error, OutputError, RefindexError, SourceError, StaleIndexError,
                             UnsupportedError)
from refindex.errors import WorkerCrashed, WorkerTimeout
from refindex.isolation.worker import Worker

from conftest import assert_same_values, consumer_open, free_port, moto_s3, notes, scan_open, zvalues

from corpus import CORPUS  # noqa: E402
import webserver


def _simple(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        f.create_dataset("a", data=np.arange(1000, dtype="i4"), chunks=(100,), compression="gzip")
        f.create_dataset("b", data=np.linspace(0, 1, 50))
        f.create_dataset("small", data=np.arange(10, dtype="u1"))  # inlined (below the threshold)
    return path


# ------------------------------------------------------------------ bad inputs
def test_not_hdf5_and_truncated_are_clean_errors(tmp_path):
    text = tmp_path / "notes.h5"
    text.write_text("hello, not HDF5\n" * 100)
    with pytest.raises(NotHDF5Error) as e:
        refindex.scan(str(text))
    assert str(text) in str(e.value)
    good = _simple(tmp_path / "good.h5")
    data = good.read_bytes()
    for cut in (8, 100, 600, len(data) // 2, len(data) - 10):
        bad = tmp_path / f"cut{cut}.h5"
        bad.write_bytes(data[:cut])
        with pytest.raises(RefindexError) as e:
            refindex.scan(str(bad))
        assert e.value.file and str(bad) in str(e.value)


def test_superblock_bit_flip_is_clean_error(tmp_path):
    data = bytearray(_simple(tmp_path / "good.h5").read_bytes())
    data[9] ^= 0xFF  # superblock version
    bad = tmp_path / "flip.h5"
    bad.write_bytes(bytes(data))
    with pytest.raises(RefindexError, match="flip.h5"):
        refindex.scan(str(bad), isolate=True, timeout=30)


def test_directory_and_missing_file(tmp_path):
    with pytest.raises(SourceError, match="not found"):
        refindex.scan(str(tmp_path / "nope.h5"))
    with pytest.raises(SourceError):
        refindex.scan(str(tmp_path))


def test_cyclic_soft_links_do_not_hang(tmp_path):
    p = tmp_path / "cycle.h5"
    with h5py.File(p, "w") as f:
        g = f.create_group("g")
        g.create_dataset("x", data=np.arange(5))
        f["a"] = h5py.SoftLink("/b")
        f["b"] = h5py.SoftLink("/a")
        g["up"] = h5py.SoftLink("/g")  # a group linking to itself
        g["self"] = h5py.SoftLink("/g/self")
    for convention in ("plain", "hdmf"):
        refs = refindex.scan(str(p), isolate=True, timeout=30, convention=convention)
        links = json.loads(refs["refs"].get(".zattrs", "{}")).get("zarr_link") or notes(refs, "").get("zarr_link", [])
        assert {e["name"] for e in links} >= {"a", "b"}
        np.testing.assert_array_equal(consumer_open(refs)["g/x"][:], np.arange(5))
    assert refindex.verify(str(p), refs).ok


def test_absurd_shape_is_indexed_without_allocating(tmp_path):
    p = tmp_path / "huge.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("big", shape=(10**15,), maxshape=(None,), chunks=(1 << 20,), dtype="f8")
    with Worker(memory_limit=2 << 30) as worker:  # a grid-sized allocation would fail the job
        refs, _ = worker.run(pipeline.scan_refs_job, {"source": str(p), "options": ScanOptions()}, timeout=30)
    z = consumer_open(refs)["big"]
    assert z.shape == (10**15,) and z[123456789] == 0


# ------------------------------------------------------------------ external files
def test_missing_external_link_file(tmp_path):
    p = tmp_path / "main.h5"
    with h5py.File(p, "w") as f:
        f["ext"] = h5py.ExternalLink("gone.h5", "/data")
        f.create_dataset("x", data=[1, 2, 3])
    refs = refindex.scan(str(p), follow_external=True)
    link = notes(refs, "")["zarr_link"][0]
    assert link["source"] == "gone.h5" and "unresolved" in link["refindex_link_type"]
    assert "not found" in refs["refindex"]["external"]["gone.h5"]["error"]


def _external_storage(folder: Path, name: str, ext_name: str, values: np.ndarray) -> Path:
    """A file whose dataset's raw data lives in ``ext_name`` (H5Pset_external), written from ``folder``."""
    cwd = os.getcwd()
    os.chdir(folder)  # libhdf5 resolves external storage names against the working directory
    try:
        with h5py.File(name, "w") as f:
            f.create_dataset("x", shape=values.shape, dtype=values.dtype,
                             external=[(ext_name, 0, values.nbytes)])[...] = values
    finally:
        os.chdir(cwd)
    return folder / name


def test_missing_external_storage_file(tmp_path):
    p = _external_storage(tmp_path, "m.h5", "raw.bin", np.arange(10, dtype="i4"))
    (tmp_path / "raw.bin").unlink()
    with pytest.raises(RefindexError, match="missing"):
        refindex.scan(str(p))


def test_external_storage_escape_refused(tmp_path, monkeypatch):
    inner = tmp_path / "inner"
    inner.mkdir()
    values = np.arange(10, dtype="i4")
    p = _external_storage(inner, "esc.h5", "../outside.bin", values)
    with pytest.raises(UnsupportedError, match="outside the allowed root"):
        refindex.scan(str(p))
    skipped = refindex.scan(str(p), on_unsupported="skip")
    assert "outside the allowed root" in skipped["refindex"]["skipped"][0]["reason"]
    for kw in ({"allow_outside": True}, {"allowed_root": str(tmp_path)}):
        refs = refindex.scan(str(p), **kw)
        np.testing.assert_array_equal(consumer_open(refs)["x"][:], values)
    q = _external_storage(inner, "abs.h5", str(tmp_path / "outside.bin"), values)
    with pytest.raises(UnsupportedError, match="outside"):
        refindex.scan(str(q))


def test_external_link_escape_not_followed(tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f.create_dataset("data", data=np.arange(4))
    p = inner / "main.h5"
    with h5py.File(p, "w") as f:
        f["ext"] = h5py.ExternalLink("../other.h5", "/data")
    refs = refindex.scan(str(p), follow_external=True)
    entry = refs["refindex"]["external"]["../other.h5"]
    assert "outside the allowed root" in entry["error"] and "refs" not in entry
    # libhdf5 was not even asked to open it
    assert "unresolved" in notes(refs, "")["zarr_link"][0]["refindex_link_type"]
    refs = refindex.scan(str(p), follow_external=True, allow_outside=True)
    assert "refs" in refs["refindex"]["external"]["../other.h5"]


# ------------------------------------------------------------------ permissions and network
def test_unreadable_file_permission_error(tmp_path):
    folder = Path(__import__("tempfile").mkdtemp(prefix="refindex-perm-"))
    try:
        os.chmod(folder, 0o755)
        p = _simple(folder / "secret.h5")
        os.chmod(p, 0o000)
        if os.geteuid() != 0:
            with pytest.raises(SourceError, match="permission denied"):
                refindex.scan(str(p))
            return
        # root reads anything: run the CLI as "nobody" instead of skipping.
        as_nobody = "import os, sys; os.setgid(65534); os.setuid(65534); "
        try:  # can nobody run this interpreter and import refindex from this checkout at all?
            probe = subprocess.run([sys.executable, "-c", as_nobody + "import refindex.cli"],
                                   capture_output=True, text=True, timeout=60, cwd="/")
        except PermissionError:
            pytest.skip("cannot switch to user nobody")
        if probe.returncode != 0:  # e.g. the interpreter or checkout lives under /root
            last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"user nobody cannot run this interpreter/checkout (so the check needs a non-root run): {last}")
        code = as_nobody + "from refindex.cli import main; sys.exit(main(sys.argv[1:]))"
        r = subprocess.run([sys.executable, "-c", code, "scan", str(p), "-o", str(folder / "o.json")],
                           capture_output=True, text=True, timeout=60, cwd="/")
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "permission denied" in lines[0] and str(p) in lines[0], r.stderr
        assert not (folder / "o.json").exists()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_transient_http_errors_are_retried(tmp_path, monkeypatch):
    monkeypatch.setattr(source_mod.retry_policy, "backoff", 0.01)
    p = _simple(tmp_path / "web.h5")
    with webserver.serve(etag=False, last_modified=False) as server:
        url = server.put("web.h5", p.read_bytes())
        server.failures = 2
        refs = refindex.scan(url)
        assert len(server.requests) > 2 and server.failures == 0  # the failures happened and were retried
        with h5py.File(p) as f:
            np.testing.assert_array_equal(refindex.open(refs)["a"][:], f["a"][()])
        server.failures, server.requests[:] = 10**6, []  # now it never recovers: a clean error after the retries
        with pytest.raises(SourceError):
            refindex.scan(url)
        # every attempt was retried, then it gave up (fsspec's http info may try HEAD and GET;
        # the file's head and tail are asked for together with it)
        tries = source_mod.retry_policy.retries + 1
        assert tries <= len(server.requests) <= 4 * tries


def test_size_head_and_tail_come_in_one_round_trip(tmp_path):
    """The size is asked for with the file's first and last bytes (a suffix range), not before them."""
    p = _simple(tmp_path / "web.h5")
    with webserver.serve(etag=False, last_modified=False) as server:
        url = server.put("web.h5", p.read_bytes())
        stats: dict = {}
        refs = refindex.scan(url, stats=stats)
        opts = source_mod.FetchOptions()
        asked = [(method, rng) for method, _, rng in server.requests]
        assert sorted(asked, key=str) == sorted(
            [("HEAD", None), ("GET", f"bytes=0-{opts.first_read - 1}"),
             ("GET", f"bytes=-{opts.tail_read + opts.block_size}")], key=str)  # nothing else: a small file
        assert (stats["round_trips"], stats["requests"]) == (1, 2)
        with h5py.File(p) as f:
            np.testing.assert_array_equal(refindex.open(refs)["a"][:], f["a"][()])


def test_unreachable_host_is_clean_error(monkeypatch):
    monkeypatch.setattr(source_mod.retry_policy, "backoff", 0.01)
    with pytest.raises(SourceError):
        refindex.scan(f"http://127.0.0.1:{free_port()}/x.h5")


# ------------------------------------------------------------------ isolation
def test_a_job_s_time_limit_starts_when_its_worker_is_ready(tmp_path, monkeypatch):
    """A worker that takes 2 s to start (an interpreter importing h5py and zarr on a busy machine) still runs
    a job limited to 1 s: the limit counts the job.  Before, the start counted, and the good files of a
    batch with --timeout 4 timed out at a load of 11 on 2 cores."""
    (tmp_path / "sitecustomize.py").write_text("import time\ntime.sleep(2.0)  # a slow interpreter start\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    with Worker() as w:
        assert w.run(selftest, {"kind": "ok"}, timeout=1.0) == "ok"
        with pytest.raises(WorkerTimeout, match="timed out after 1 s"):  # the job's own time still counts
            w.run(selftest, {"kind": "hang"}, timeout=1.0)


def test_isolation_turns_crash_and_hang_into_errors():
    with Worker() as w:
        with pytest.raises(WorkerCrashed, match=r"libhdf5 crashed \(signal 11"):
            w.run(selftest, {"kind": "crash"}, timeout=30)
        assert w.run(selftest, {"kind": "ok"}, timeout=30) == "ok"  # restarted
        with pytest.raises(WorkerTimeout, match="timed out after 0.5 s"):
            w.run(selftest, {"kind": "hang"}, timeout=0.5)
        assert w.run(selftest, {"kind": "ok"}, timeout=30) == "ok"
        assert w.started == 3
        with pytest.raises(ValueError, match="not a refindex job"):
            w.run(os.system, {"command": "true"}, timeout=30)  # only refindex's own jobs run


def test_a_watched_job_that_stops_moving_is_stopped_at_its_stall_limit(tmp_path):
    """Issue 45: the time limit of an isolated scan is sized by the file (60 s at least), so a small file
    on which libhdf5 loops held its worker for a minute.  A watched scan's worker pulses whenever it
    gets to run (refindex.feedback.progress); one held in a single call for its stall limit is killed with an
    error naming the file, in a fresh-interpreter Worker and in the command line's forked child alike.
    A job that keeps running Python past that limit is not."""
    from refindex.testing import stall

    src = str(tmp_path / "looping.h5")
    said = ("no progress for 1 s: libhdf5 held the worker in one call while it read the file, as it does when it "
            "loops on a damaged file (worker killed)")
    with Worker() as w:
        with pytest.raises(WorkerTimeout) as err:
            w.run(stall, {"source": src, "limit": 1.0, "moving": 0.3}, timeout=600)
        assert (err.value.file, err.value.reason) == (src, said)
        assert w.run(stall, {"source": src, "limit": 1.0, "moving": 2.0, "hold": False}, timeout=600) == "done"
    code = ("import sys\nfrom refindex.isolation import forked\nfrom refindex.testing.jobs import stall\n"
            "assert forked.can_fork()\n"
            "for kw in ({'limit': 1.0, 'moving': 0.3}, {'limit': 1.0, 'moving': 2.0, 'hold': False}):\n"
            "    try:\n"
            "        print(forked.run_forked(stall, {'source': sys.argv[1], **kw}, timeout=600))\n"
            "    except Exception as e:\n"
            "        print(type(e).__name__, e.file, e.reason)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-c", code, src], capture_output=True, text=True, timeout=120, env=env)
    assert r.stdout.splitlines() == [f"WorkerTimeout {src} {said}", "done"], r.stderr


def test_isolated_scan_equals_in_process(tmp_path):
    p = _simple(tmp_path / "s.h5")
    stats: dict = {}
    isolated = ScanOptions(isolate=True, timeout=60)
    assert pipeline.scan_refs(p, isolated, stats=stats) == refindex.scan(str(p))
    assert "scan_seconds" in stats
    with pytest.raises(NotHDF5Error):
        pipeline.scan_refs(__file__, isolated)  # a Python file: the worker's error comes back as itself


# ------------------------------------------------------------------ CLI
def test_cli_one_line_error_and_debug_trace(tmp_path, capsys):
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    out = tmp_path / "o.json"
    assert cli_main(["scan", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("refindex: error: ") and str(bad) in err[0]
    assert not out.exists()
    assert cli_main(["--debug", "scan", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("refindex: error: ")
    assert cli_main(["--debug", "scan", str(bad), "-o", str(out), "--isolate", "--timeout", "60"]) == 2
    err = capsys.readouterr().err
    assert "in the worker process" in err and err.strip().splitlines()[-1].startswith("refindex: error: ")


# ------------------------------------------------------------------ atomic writes
@pytest.mark.parametrize("where", ["replace", "write"])
def test_failed_write_keeps_old_index(tmp_path, monkeypatch, where):
    p = _simple(tmp_path / "s.h5")
    out = tmp_path / "s.refs.json"
    refindex.scan_to_file(str(p), out)
    old = out.read_bytes()
    with h5py.File(p, "a") as f:
        f.create_dataset("new", data=np.arange(3))

    def boom(*a, **k):
        raise OSError("disk on fire")

    if where == "replace":
        monkeypatch.setattr(os, "replace", boom)
    else:
        monkeypatch.setattr(os, "fsync", boom)  # fails after part of the data went to the temp file
    with pytest.raises(OutputError, match="s.refs.json: cannot write the index: OSError: disk on fire"):
        refindex.scan_to_file(str(p), out)  # (naming the index, not the input or a temporary file)
    monkeypatch.undo()
    assert out.read_bytes() == old
    assert json.loads(old)["refs"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["s.h5", "s.refs.json"]  # no temp file left


def test_cli_failed_scan_leaves_existing_index(tmp_path):
    p = _simple(tmp_path / "s.h5")
    out = tmp_path / "s.refs.json"
    assert cli_main(["scan", str(p), "-o", str(out)]) == 0
    old = out.read_bytes()
    p.write_bytes(p.read_bytes()[:300])  # the source got damaged
    assert cli_main(["scan", str(p), "-o", str(out)]) == 2
    assert out.read_bytes() == old
    assert not [x for x in os.listdir(tmp_path) if x.startswith(".refindex-")]


# ------------------------------------------------------------------ provenance
def test_stale_index_detected_and_override(tmp_path, capsys):
    p = _simple(tmp_path / "s.h5")
    out = tmp_path / "s.refs.json"
    refs = refindex.scan_to_file(str(p), out, return_refs=True)["refs"]
    src = refs["refindex"]["source"]
    assert src["url"] == str(p) and src["size"] == p.stat().st_size and "mtime" in src
    assert "storage_options" not in refs["refindex"]["options"]
    refindex.open(str(out))  # unchanged: fine
    with h5py.File(p, "a") as f:  # rewritten in place: offsets may now point elsewhere
        f["b"][...] = 7.0
        f.create_dataset("c", data=np.arange(1000))
    with pytest.raises(StaleIndexError, match="changed since it was indexed"):
        refindex.open(str(out))
    with pytest.raises(StaleIndexError):
        refindex.verify(str(p), str(out))
    assert refindex.open(str(out), check_source=False)["a"].shape == (1000,)
    assert refindex.verify(str(p), str(out), check_source=False).ok is False  # "b" now differs
    assert cli_main(["verify", str(p), str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "changed since it was indexed" in err[0]
    assert cli_main(["verify", str(p), str(out), "--no-check-source"]) == 1  # compared, differs
    # same size, new mtime, the same bytes (touched, or copied over by the same file): not refused
    refs = refindex.scan(str(p))
    os.utime(p, (1, 1))
    refindex.open(refs)
    # same size, new mtime, other bytes: stale
    data = bytearray(p.read_bytes())
    data[-1] ^= 1
    p.write_bytes(bytes(data))
    with pytest.raises(StaleIndexError, match="mtime .* the bytes the index depends on differ"):
        refindex.open(refs)
    # no provenance (another tool's index): not checked
    del refs["refindex"]
    refindex.open(refs)


# ------------------------------------------------------------------ security
def test_credentials_stripped_from_urls(tmp_path):
    p = _simple(tmp_path / "s.h5")
    refs = refindex.scan(str(p), url="https://alice:hunter2@example.org/data/s.h5")
    text = json.dumps(refs)
    assert "hunter2" not in text and "alice" not in text
    assert refs["templates"]["u"] == "https://example.org/data/s.h5"
    assert safety.strip_credentials("s3://bucket/key") == "s3://bucket/key"
    assert safety.strip_credentials("/local/a@b.h5") == "/local/a@b.h5"


def test_secret_check_refuses(tmp_path):
    refs = {"templates": {"u": "s3://b/k"}, "refindex": {"options": {"note": "xyzSECRETxyz"}}, "refs": {}}
    with pytest.raises(RefindexError, match="secret"):
        safety.check_no_secrets(refs, {"secret": "xyzSECRETxyz"})
    safety.check_no_secrets(refs, {"secret": "other-value"})


def test_pickle_codec_refused():
    refs = {"refs": {"x/.zarray": json.dumps({"compressor": None, "filters": [{"id": "pickle"}]}),
                     "y/.zarray": json.dumps({"compressor": {"id": "zlib"}, "filters": None})}}
    assert safety.unsafe_codecs(refs) == [("x/.zarray", "pickle")]
    with pytest.raises(UnsupportedError, match="pickle"):
        safety.check_codecs(refs)


def test_inline_total_cap(tmp_path):
    p = tmp_path / "many.h5"
    with h5py.File(p, "w") as f:
        for i in range(20):
            f.create_dataset(f"s{i}", data=[os.urandom(300).hex()], dtype=h5py.string_dtype())
    refindex.scan(str(p))
    with pytest.raises(UnsupportedError, match="inline data, over the limit of 1000"):
        refindex.scan(str(p), max_inline_total=1000)
    assert cli_main(["scan", str(p), "-o", str(tmp_path / "o.json"), "--max-inline-total", "1k"]) == 2


def _corpus_files() -> list[Path]:
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.exists():
        pytest.skip(f"shared corpus not found at {CORPUS} (set REFINDEX_CORPUS)")
    rows = [line.split("\t") for line in manifest.read_text().splitlines()[1:] if line.strip()]
    return [CORPUS / r[0] for r in rows if (CORPUS / r[0]).exists()]


def test_no_unsafe_codec_in_an_output_written_by_refindex(tmp_path):
    """The index scan_to_file writes names only allowlisted codecs (never pickle); every corpus file's
    index (and its linked files') is checked in test_corpus, on the scan made there."""
    out = tmp_path / "one.json"
    refindex.scan_to_file(str(_corpus_files()[0]), out, on_unsupported="skip")
    assert safety.unsafe_codecs(json.loads(out.read_text())) == []


# ------------------------------------------------------------------ S3 (moto): etag staleness, secrets
@pytest.fixture(scope="module")
def s3():
    with moto_s3("AKIAREFINDEXTEST", "sshh-very-secret") as opts:
        import s3fs

        opts.pop("anon")
        fs = s3fs.S3FileSystem(**opts)
        fs.mkdir("rel")
        yield opts, fs


def test_s3_etag_staleness_and_no_secrets(s3, tmp_path):
    opts, fs = s3
    p = _simple(tmp_path / "s.h5")
    fs.put(str(p), "rel/s.h5")
    refs = refindex.scan("s3://rel/s.h5", storage_options=opts)
    text = json.dumps(refs)
    assert "sshh-very-secret" not in text and "AKIAREFINDEXTEST" not in text
    assert refs["refindex"]["source"].get("etag")
    remote = {k: v for k, v in opts.items()}
    refindex.open(refs, remote_options=remote)
    data = bytearray(p.read_bytes())
    data[-1] ^= 1  # same size, different content
    fs.pipe("rel/s.h5", bytes(data))
    with pytest.raises(StaleIndexError, match="etag"):
        refindex.open(refs, remote_options=remote)
    refindex.open(refs, remote_options=remote, check_source=False)


def test_chunk_listed_but_not_found_by_lookup(tmp_path):
    """Bits flipped in a B-tree make libhdf5's lookup miss a chunk that chunk_iter still lists
    (h5py reads fill values there): the index must hold what h5py reads, not the listed bytes."""
    src = CORPUS / "hdf5" / "h5repack_nbit.h5"
    if not src.exists():
        pytest.skip(f"corpus file {src} not found")
    data = bytearray(src.read_bytes())
    # found by the long fuzz (benchmarks/fuzz_long.py, seed 1): byte offset -> xor
    for pos, bits in {3892: 2, 4020: 64, 6030: 32, 6397: 1, 7486: 4, 12116: 12}.items():
        data[pos] ^= bits
    # The datasets' type is a 31-bit integer in 4 bytes, which is copied in whatever the chunk
    # index says (its stored bytes are not numpy's int32): widen it to 32 bits so the chunk
    # index is what decides.  Datatype message: class 0 v1, signed LE, size 4, offset 0, precision 31.
    int31 = bytes([0x10, 0x08, 0, 0, 4, 0, 0, 0, 0, 0, 31, 0])
    at = [i for i in range(len(data)) if data[i:i + len(int31)] == int31]
    assert len(at) == 2, at
    for i in at:
        data[i + 10] = 32
    bad = tmp_path / "nbit_damaged.h5"
    bad.write_bytes(bytes(data))
    with h5py.File(bad, "r") as f:
        d = f["dset_int31"]
        listed = []
        d.id.chunk_iter(listed.append)
        expected = d[()]
        with pytest.raises(Exception):  # the lookup misses a chunk the listing has
            d.id.read_direct_chunk(listed[1].chunk_offset)
    assert len(listed) == 4 and not expected[0, 10:20].any()
    refs, root = scan_open(bad)
    assert "damaged chunk index" in notes(refs, "dset_int31")["refindex_inlined"]
    assert_same_values(expected, zvalues(root["dset_int31"]))
    # the check is what catches it: switched off, the listed bytes are indexed
    unchecked_refs, unchecked = scan_open(bad, check_sample=False)
    assert "refindex_inlined" not in notes(unchecked_refs, "dset_int31")
    assert np.array_equal(zvalues(unchecked["dset_int31"])[0, 10:20], np.arange(10, 20))


def test_damaged_chunk_index_is_an_error_not_wrong_data(tmp_path):
    """A zeroed B-tree node lists one chunk five times (four with offset 0): refuse, naming the dataset."""
    src = CORPUS / "hdf5" / "1_a.h5"
    if not src.exists():
        pytest.skip(f"corpus file {src} not found")
    data = bytearray(src.read_bytes())
    data[1474:1666] = bytes(1666 - 1474)  # found by the long fuzz (benchmarks/fuzz_long.py, seed 1)
    bad = tmp_path / "1_a_damaged.h5"
    bad.write_bytes(bytes(data))
    with pytest.raises(refindex.RefindexError, match="damaged chunk index") as err:
        refindex.scan(str(bad))
    assert err.value.path == "/source_dset"
