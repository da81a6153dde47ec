"""Seeded, time-bounded mutation fuzz of the scanner over small real corpus files.

Every mutated file (bit flips, truncation, zeroed/0xFF ranges) must end in an index
that reads back exactly what h5py reads, or in a RefindexError; never an interpreter
crash, a hang, a non-RefindexError exception or partial output.  Each case runs in
one reused worker process (refindex.isolation.worker), so a crash or hang inside libhdf5
becomes a caught, counted outcome instead of killing pytest; those are printed.
The long run is ``make fuzz`` (benchmarks/fuzz_long.py).
"""

from __future__ import annotations


import pytest

from refindex.testing import fuzz

from corpus import CORPUS  # noqa: E402


def test_fuzz_mutated_corpus_files(tmp_path, capsys):
    if not (CORPUS / "MANIFEST.tsv").exists():
        pytest.skip(f"shared corpus not found at {CORPUS} (set REFINDEX_CORPUS); nothing real to mutate")
    files = fuzz.corpus_files(str(CORPUS), max_size=48 << 10, limit=24)
    assert len(files) >= 10
    report = fuzz.run(files, str(tmp_path), seed=20240611, per_file=15, budget=45.0, timeout=8.0,
                      keep=str(tmp_path / "kept"))
    with capsys.disabled():
        print("\n" + report.summary())
        for line in report.notes:
            print("  caught:", line)
    assert report.findings == [], "\n".join(report.findings)
    assert len(report.files) >= 10 and report.runs >= 200
    allowed = {"exact", "crash", "hang", "h5py-nondeterministic", "index-read-error"}
    assert all(k in allowed or k.startswith("error:") for k in report.outcomes), report.outcomes
    assert report.outcomes["exact"] > 0 and sum(v for k, v in report.outcomes.items() if k.startswith("error:")) > 0


def test_mutations_are_seeded():
    import random

    data = bytes(range(256)) * 40
    a = [fuzz.mutate(data, random.Random(7)) for _ in range(5)]
    b = [fuzz.mutate(data, random.Random(7)) for _ in range(5)]
    assert a == b and all(m != data for _, m in a)


# Findings of earlier long runs, each pinned by the same seeded mutation of the corpus file.

def _mutated(tmp_path, relpath: str, seed: int, expect: str) -> str:
    """The corpus file ``relpath`` after ``fuzz.mutate`` with ``random.Random(seed)`` (checked to be ``expect``)."""
    import random

    source = CORPUS / relpath
    if not source.exists():
        pytest.skip(f"corpus file {relpath} not found under {CORPUS} (set REFINDEX_CORPUS)")
    what, data = fuzz.mutate(source.read_bytes(), random.Random(seed))
    assert what == expect  # the mutation this test was written for
    out = tmp_path / source.name
    out.write_bytes(data)
    return str(out)


@pytest.mark.parametrize("relpath, seed, expect, dataset, chunk", [
    ("netcdf-c/ref_szip.h5", 2984, "flip bits at [1768, 5578]", "/dset_szip", "(1, 1)"),
    ("hdf5/noencoder.h5", 266, "flip bits at [3651, 6044]", "/noencoder_szip_dset.h5", "(0,)"),
])
def test_fuzz_szip_stream_ending_early_fails_the_scan(tmp_path, relpath, seed, expect, dataset, chunk):
    """A damaged szip stream with padded scanlines decodes to uninitialised memory in libhdf5 and
    imagecodecs alike (h5py read values that differ between reads): the scan refuses the array."""
    from refindex.api import scan_to_file
    from refindex.errors import RefindexError

    src = _mutated(tmp_path, relpath, seed, expect)
    out = tmp_path / "refs.json"
    with pytest.raises(RefindexError) as e:
        scan_to_file(src, str(out), return_refs=True)
    assert e.value.path == dataset and e.value.file == src
    assert f"damaged szip chunk {chunk}: its stream decodes to " in e.value.reason
    assert "uninitialised memory" in e.value.reason
    assert not out.exists()


def test_fuzz_lost_filter_pipeline_is_a_damaged_chunk_index(tmp_path):
    """One bit destroys a dataset's filter-pipeline message: libhdf5 reads its 20-byte stored
    chunk as an unfiltered 40-byte one and fills the rest from uninitialised memory (values that
    differ between reads).  Without filters every chunk is stored whole: the scan refuses it."""
    from refindex.api import scan_to_file
    from refindex.errors import RefindexError

    src = _mutated(tmp_path, "hdf5/noencoder.h5", 1020, "flip bits at [3785]")
    out = tmp_path / "refs.json"
    with pytest.raises(RefindexError) as e:
        scan_to_file(src, str(out))
    assert e.value.path == "/noencoder_szip_shuffle_fletcher_dset.h5" and e.value.file == src
    assert "damaged chunk index: chunk (0,) of a dataset without filters is stored in 20 bytes, not the " \
           "chunk's 40" in e.value.reason
    assert not out.exists()


def test_szip_shortfall_sees_a_stream_that_ends_early():
    import imagecodecs
    import numpy as np

    from refindex.codecs import szip_shortfall

    raw = (np.arange(800, dtype="<i4") % 97).tobytes()
    for ppb, ppsl in ((8, 10), (4, 10), (8, 16)):
        params = (32 | 1, ppb, 32, ppsl)  # NN preprocessing, as libhdf5 writes 'nn'
        enc = bytes(imagecodecs.szip_encode(raw, *params, header=True))
        assert szip_shortfall(enc, *params) is None
        assert imagecodecs.szip_decode(enc, *params, header=True) == raw
        cut = enc[: len(enc) * 2 // 3]
        got, need = szip_shortfall(cut, *params)
        assert got < need
        # What the stock codec makes of it: in older imagecodecs releases the full size, the rest uninitialised
        # memory (as libhdf5's szip filter does); imagecodecs 2026.11.11 raises instead.
        try:
            assert len(imagecodecs.szip_decode(cut, *params, header=True)) == len(raw)
        except imagecodecs.SzipError as e:
            assert "truncated" in str(e)


def test_fuzz_link_target_not_utf8_is_a_named_error(tmp_path):
    """A flipped bit made an external link's target path invalid UTF-8; h5py hands it back as
    bytes, which reached the JSON writer (TypeError).  Now: a named error, or a skipped link."""
    import json

    from refindex.api import scan_to_file
    from refindex.errors import UnsupportedError
    from refindex.read import notes

    src = _mutated(tmp_path, "hdf5/textlinksrc.h5", 475, "flip bits at [1151]")
    out = tmp_path / "refs.json"
    with pytest.raises(UnsupportedError) as e:
        scan_to_file(src, str(out))
    assert (e.value.file, e.value.path) == (src, "/ext2soft_link1")
    assert e.value.reason == "the link's target path is not UTF-8 text (b'/sof\\xf4_dset1'): an index cannot name it"
    assert not out.exists()

    summary = scan_to_file(src, str(out), on_unsupported="skip")  # the other links are kept
    assert summary["skipped"] == [{"path": "/ext2soft_link1", "reason": e.value.reason}]
    links = notes(str(out), "")["zarr_link"]
    assert {x["name"]: (x["source"], x["path"]) for x in links} == {
        "ext2softdangle_link1": ("tsoftlinks.h5", "/soft_dangle"), "ext_link1": ("textlinktar.h5", "group"),
        "ext_link2": ("textlinktar.h5", "dset"), "ext_link3": ("textlinktar.h5", "type"),
        "ext_link4": ("textlinktar.h5", "group/elink_t2"), "ext_link5": ("textlinktar.h5", "empty_group")}


def test_link_values_and_names_that_are_not_utf8_are_named_errors(tmp_path):
    """Link values and member names that are not UTF-8: named errors, never a TypeError or a mangled
    path (h5py's link objects turn such a soft link's target into the text "b'...'")."""
    import h5py

    from refindex.api import scan
    from refindex.errors import RefindexError, UnsupportedError

    src = tmp_path / "links.h5"
    with h5py.File(src, "w") as f:
        f["data"] = [1, 2]
        f.id.links.create_soft(b"soft", b"/d\xe9ta")
        f.id.links.create_external(b"ext", b"other\xff.h5", b"/x")
    with pytest.raises(UnsupportedError, match=r"^.*: /ext: the link's file name is not UTF-8 text "
                                               r"\(b'other\\xff.h5'\): an index cannot name it$"):
        scan(str(src))
    refs = scan(str(src), on_unsupported="skip")
    assert "data/.zarray" in refs["refs"] and ".zattrs" not in refs["refs"]  # both links left out
    with h5py.File(src, "a") as f:
        del f["ext"]
    with pytest.raises(UnsupportedError, match=r": /soft: the link's target path is not UTF-8 text \(b'/d\\xe9ta'\)"):
        scan(str(src))
    bad = tmp_path / "names.h5"
    with h5py.File(bad, "w") as f:
        g = f.create_group("g")
        g["x"] = 1
        h5py.h5l.LinkProxy.create_hard(g.id.links, b"caf\xe9", g.id, b"x")
    with pytest.raises(RefindexError, match=r"/g: a member name is not UTF-8 text \(b'caf\\xe9'\)"):
        scan(str(bad))


def test_fuzz_worker_ending_without_an_answer_is_a_clear_cli_error(tmp_path):
    """The SZ filter plugin calls exit(0) on a chunk whose header it does not recognise: the scan's
    worker ends with exit code 0 and no answer.  The command says so (exit 2, one line naming the
    file and the plugin's last words), keeps the plugin's chatter off stdout and writes nothing."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = _mutated(tmp_path, "hdf5_plugins/h5ex_d_sz.h5", 557, "flip bits at [4569, 5560]")
    out = tmp_path / "out" / "sz.refs.json"
    out.parent.mkdir()
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "refindex", "scan", src, "-o", str(out), "--no-progress", *args],
                              capture_output=True, text=True, timeout=120, env=env)

    plain = cli("--no-isolate")
    if plain.returncode != 0 or "Wrong version" not in plain.stdout:
        pytest.skip(f"the SZ plugin no longer exits on this file (--no-isolate: exit {plain.returncode})")
    assert not out.exists()  # unisolated, the command "succeeded" without writing anything
    r = cli()
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        f"refindex: error: {src}: the worker ended without an answer (exit code 0): a library it ran (an HDF5 "
        "filter plugin?) ended the process; it printed last: 'Please double-check if the compressed data (or "
        "file) is correct.'"]
    assert os.listdir(out.parent) == []


def test_fuzz_libhdf5_looping_on_a_small_file_stops_without_progress(tmp_path):
    """An 11 KB mutant of hdf5/test_ds_be.h5 (bytes 5031-5169 zeroed; benchmarks/fuzz_long.py --seed 7)
    makes libhdf5 loop.  Before (issue 45): "timed out after 60 s (worker killed)", the minimum time
    limit, 63 s after the call.  Now the worker, held by libhdf5 in one call, stops pulsing and is
    stopped at the 10 s stall limit, with an error naming the file."""
    import refindex
    from refindex.errors import WorkerTimeout

    source = CORPUS / "hdf5/test_ds_be.h5"
    if not source.exists():
        pytest.skip(f"corpus file hdf5/test_ds_be.h5 not found under {CORPUS} (set REFINDEX_CORPUS)")
    data = bytearray(source.read_bytes())
    data[5031:5169] = bytes(5169 - 5031)
    src = tmp_path / "test_ds_be.h5"
    src.write_bytes(bytes(data))
    with pytest.raises(WorkerTimeout) as e:
        refindex.scan(str(src), isolate=True)
    assert e.value.file == str(src)
    assert e.value.reason == ("no progress for 10 s: libhdf5 held the worker in one call while it read the file, as "
                              "it does when it loops on a damaged file (worker killed)")
