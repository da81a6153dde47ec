"""Hostile HDF5 files never take the command down (issue #13, part 6).

Two small files, each built here with h5py and then damaged at one place found by its
signature (never a hard-coded offset), make libhdf5 itself fail in ways no Python code
can catch inside the process that runs it (checked with libhdf5 2.0.0, h5py 3.16):

* **abort** (:func:`write_abort_file`): a dimension scale whose ``CLASS`` attribute
  reads ``DIMENCION_SCALE`` instead of ``DIMENSION_SCALE`` (one byte: ``S`` -> ``C``,
  the single flip the fuzzer found in hdf5's test_ds_be.h5).  ``H5DSis_scale`` (HDF5's
  high-level library, called for every dataset to find dimension scales) reads the
  16-byte value into a buffer, finds it is not "DIMENSION_SCALE", frees the buffer, and
  then -- its result still "unknown" (-1) -- takes the error path, which frees the same
  buffer again.  glibc detects the double free and aborts: SIGABRT.  A healthy file can
  do the same: any 16-byte null-terminated ``CLASS`` other than "DIMENSION_SCALE".
* **loop** (:func:`write_loop_file`): the first object header in the global heap
  collection (``GCOL``, where variable-length strings and the dimension-scale
  references live) zeroed: heap index 0 and size 0.  ``H5HG__cache_heap_deserialize``
  walks the collection with ``p = begin + need``, where ``need`` is the object's size
  for index 0 (the free-space object) -- here 0, so ``p`` never moves: an endless loop
  as soon as anything reads a variable-length value (the scanner reads attributes).

Through ``refindex scan`` with default options each ends in one line on stderr and exit
code 2, leaving neither the index nor a temporary file; with ``--no-isolate`` the same
command dies of SIGABRT / never ends, which the tests check first, so they show the
isolation doing the work (and skip, saying so, if a fixed libhdf5 no longer fails).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import refindex
from refindex import cli
from refindex.isolation import forked
from refindex.cli import main as cli_main
from refindex.errors import WorkerCrashed
from refindex.formats import atomic_folder, remove_leftovers

ROOT = Path(refindex.__file__).resolve().parents[1]  # the checkout under test, whatever is installed


def write_base_file(path: Path) -> bytes:
    """A small file with fixed content: a gzip-chunked dataset, a dimension scale, text attributes."""
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(12.0))
        d = f.create_dataset("data", data=np.arange(48, dtype="i4").reshape(12, 4), chunks=(6, 2), compression="gzip")
        f["x"].make_scale("x")  # CLASS = "DIMENSION_SCALE" (16-byte, null-terminated)
        d.dims[0].attach_scale(f["x"])  # DIMENSION_LIST: variable-length references, in the global heap
        d.attrs["units"] = "volts"  # a variable-length string, also in the global heap
        f.attrs["title"] = "hostile"
    return path.read_bytes()


def write_abort_file(path: Path) -> Path:
    """The base file with its scale's CLASS value changed to "DIMENCION_SCALE" (see the module docstring)."""
    data = bytearray(write_base_file(path))
    value = b"DIMENSION_SCALE\x00"
    assert data.count(value) == 1, "expected one dimension scale CLASS value stored in the object header"
    data[data.index(value) + 5] = ord("C")
    path.write_bytes(bytes(data))
    return path


def write_loop_file(path: Path) -> Path:
    """The base file with the first object header of its global heap collection zeroed (see above).

    Layout (HDF5 file format spec, "Global Heap"): "GCOL", version 1, 3 reserved bytes,
    collection size (8 bytes: the file's size of lengths), then objects, each with a
    16-byte header: heap index (2), reference count (2), reserved (4), size (8).
    """
    data = bytearray(write_base_file(path))
    at = data.index(b"GCOL")
    assert data.count(b"GCOL") == 1 and data[at + 4] == 1, "expected one version-1 global heap collection"
    size = int.from_bytes(data[at + 8:at + 16], "little")
    assert 4096 <= size <= len(data) - at, f"collection size {size}: not an 8-byte length field?"
    first = at + 16
    assert int.from_bytes(data[first:first + 2], "little") != 0, "the first object should be a real one"
    data[first:first + 16] = bytes(16)
    path.write_bytes(bytes(data))
    return path


def write_good_file(path: Path) -> Path:
    write_base_file(path)
    return path


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m refindex ARGS`` in a fresh process, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "refindex", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def leftovers(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(".refindex-"))


def test_base_file_is_healthy(tmp_path):
    p = write_good_file(tmp_path / "good.h5")
    refs = refindex.scan(str(p))
    assert refindex.verify(str(p), refs).ok


def test_abort_file_ends_in_one_line_and_exit_2(tmp_path):
    bad = write_abort_file(tmp_path / "abort.h5")
    out = tmp_path / "out" / "abort.refs.json"
    out.parent.mkdir()
    plain = run_cli("scan", str(bad), "-o", str(out), "--no-isolate")
    if plain.returncode != -signal.SIGABRT:
        pytest.skip(f"libhdf5 {h5py.version.hdf5_version} no longer aborts on this file "
                    f"(--no-isolate: exit {plain.returncode}, {plain.stderr.strip()[-200:]!r})")
    r = run_cli("scan", str(bad), "-o", str(out))
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [f"refindex: error: {bad}: libhdf5 crashed (signal 6, SIGABRT)"]
    assert r.stdout == ""
    assert not out.exists() and leftovers(out.parent) == []


def test_loop_file_ends_in_one_line_and_exit_2(tmp_path):
    bad = write_loop_file(tmp_path / "loop.h5")
    out = tmp_path / "loop.refs.json"
    with pytest.raises(subprocess.TimeoutExpired):  # without isolation: still looping after 5 s
        run_cli("scan", str(bad), "-o", str(out), "--no-isolate", timeout=5)
    r = run_cli("scan", str(bad), "-o", str(out), "--timeout", "2")
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [f"refindex: error: {bad}: timed out after 2 s (worker killed); "
                                     "--timeout sets the limit"]
    assert not out.exists() and leftovers(tmp_path) == []


def test_other_commands_that_read_hdf5_are_isolated_too(tmp_path):
    bad = write_abort_file(tmp_path / "abort.h5")
    for args in (["info", str(bad)], ["schema", str(bad)]):
        r = run_cli(*args)
        assert r.returncode == 2 and r.stderr.splitlines() == [
            f"refindex: error: {bad}: libhdf5 crashed (signal 6, SIGABRT)"], (args, r.stderr)
    loop = write_loop_file(tmp_path / "loop.h5")
    r = run_cli("info", str(loop), "--timeout", "1")
    assert r.returncode == 2 and "timed out after 1 s" in r.stderr


def test_isolated_default_writes_the_same_bytes_as_no_isolate(tmp_path):
    p = write_good_file(tmp_path / "good.h5")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    ra = run_cli("scan", str(p), "-o", str(a), "--stats")
    rb = run_cli("scan", str(p), "-o", str(b), "--no-isolate", "--stats")
    assert ra.returncode == 0 and rb.returncode == 0, (ra.stderr, rb.stderr)
    assert a.read_bytes() == b.read_bytes()
    assert ra.stderr.startswith(f"wrote {a}: ") and rb.stderr.startswith(f"wrote {b}: ")
    assert '"scan_seconds"' in ra.stdout  # the stats came back from the worker
    rp = run_cli("scan", str(p), "-o", str(tmp_path / "p.parq"), "--format", "parquet")  # refused before
    assert rp.returncode == 0 and (tmp_path / "p.parq" / ".zmetadata").exists(), rp.stderr
    assert leftovers(tmp_path) == []


def test_fallback_worker_when_this_process_cannot_fork(tmp_path, capsys):
    """Here (pytest has imported numpy, whose BLAS pool is a native thread) the CLI uses a fresh interpreter."""
    assert not forked.can_fork()
    bad = write_abort_file(tmp_path / "abort.h5")
    out = tmp_path / "o.json"
    if run_cli("scan", str(bad), "-o", str(out), "--no-isolate").returncode != -signal.SIGABRT:
        pytest.skip(f"libhdf5 {h5py.version.hdf5_version} no longer aborts on this file")
    assert cli_main(["scan", str(bad), "-o", str(out)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"refindex: error: {bad}: libhdf5 crashed (signal 6, SIGABRT)"
    assert not out.exists() and leftovers(tmp_path) == []


def test_a_worker_killed_while_writing_leaves_nothing(tmp_path):
    """The parent removes the temporary file of a worker killed mid-write, forked or fresh interpreter."""
    out = tmp_path / "x.refs.json"
    code = ("import sys\nfrom argparse import Namespace\nfrom refindex import cli\nfrom refindex.isolation import forked\n"
            "from refindex.testing.jobs import die_while_writing\n"
            "assert forked.can_fork()\n"
            "cli.isolated(die_while_writing, {'source': 'x.h5', 'output': sys.argv[1]}, Namespace(timeout=30), "
            "sys.argv[1])\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=60, env=env)
    assert "WorkerCrashed: x.h5: libhdf5 crashed (signal 9, SIGKILL)" in r.stderr, r.stderr
    assert not out.exists() and leftovers(tmp_path) == []
    from refindex.testing.jobs import die_while_writing  # and through a fresh-interpreter Worker (this process)

    with pytest.raises(WorkerCrashed, match="signal 9"):
        cli.isolated(die_while_writing, {"source": "x.h5", "output": str(out)}, argparse.Namespace(timeout=30), str(out))
    assert not out.exists() and leftovers(tmp_path) == []


def test_remove_leftovers_takes_only_that_process_and_restores_a_moved_index(tmp_path):
    out = tmp_path / "idx.parq"
    mine = tmp_path / ".refindex-4242-abc.tmp"
    other = tmp_path / ".refindex-42421-def.tmp"  # another process (pid with the same digits)
    mine.write_bytes(b"x")
    other.write_bytes(b"y")
    moved = tmp_path / ".refindex-4242-old1.old"  # the previous index, moved aside when the worker died
    moved.mkdir()
    (moved / ".zmetadata").write_text("{}")
    assert sorted(remove_leftovers(out, 4242)) == [mine.name, moved.name]
    assert (out / ".zmetadata").exists() and other.exists() and not mine.exists()
    with atomic_folder(str(tmp_path / "new.parq")) as tmp:  # names carry this process's pid
        assert os.path.basename(tmp).startswith(f".refindex-{os.getpid()}-")


def test_default_time_limit_scales_with_the_file():
    assert forked.time_limit(0) == forked.time_limit(10 << 20) == 60.0  # small files: a minute
    assert forked.time_limit(1 << 30) == 512.0  # 1 s per 2 MiB
    assert forked.time_limit(10 << 30) == 5120.0
    assert forked.time_limit(None) == 600.0  # remote: size unknown before opening
    args = cli.build_parser().parse_args(["scan", "f.h5"])
    assert args.isolate is True and args.timeout is None  # isolated by default
    assert cli.build_parser().parse_args(["scan", "f.h5", "--no-isolate"]).isolate is False
    assert cli.build_parser().parse_args(["scan", "f.h5", "--isolate"]).isolate is True  # still accepted


def test_errors_with_their_own_fields_come_back_whole(monkeypatch):
    """An error class with its own ``__init__`` and fields crosses the process boundary unchanged
    (now that verify/info/schema run in a worker, whatever they raise comes back this way)."""
    from refindex import errors
    from refindex.isolation import worker as isolate

    class Refused(errors.RefindexError):
        def __init__(self, reason: str, *, key: str, uses: int = 0, file: str | None = None):
            self.key, self.uses = key, uses
            super().__init__(reason, file=file)

    monkeypatch.setattr(errors, "Refused", Refused, raising=False)
    try:
        raise Refused("x/2 names a local file", key="x/2", uses=3, file="idx.json")
    except Refused as e:
        message = isolate.error_message(e)
    back = isolate.rebuild_error(*message[1:])
    assert type(back) is Refused and str(back) == "idx.json: x/2 names a local file"
    assert (back.key, back.uses, back.reason, back.file, back.internal) == ("x/2", 3, "x/2 names a local file",
                                                                           "idx.json", False)
    assert "Refused" in back.worker_traceback
