"""The command line: scan, verify, info and demo do what they say and exit accordingly."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from conftest import consumer_open
from refindex.cli import main


@pytest.fixture()
def h5file(tmp_path):
    path = tmp_path / "data.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("a", data=np.random.default_rng(0).integers(0, 2**31, (100, 10), dtype="i4"), chunks=(10, 10), compression="gzip")
        f.create_dataset("b", data=np.linspace(0, 1, 50))
        f["s"] = "hello"
    return path


def test_scan_writes_an_index_zarr_reads(h5file, tmp_path, capsys):
    out = tmp_path / "out.refs.json"
    assert main(["scan", str(h5file), "-o", str(out), "--stats", "--inline-dataset-threshold", "0"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["total_seconds"] >= 0
    refs = json.loads(out.read_text())
    root = consumer_open(refs)
    with h5py.File(h5file) as f:
        np.testing.assert_array_equal(root["a"][...], f["a"][()])
        np.testing.assert_array_equal(root["b"][...], f["b"][()])
    assert refs["refs"]["a/0.0"][0] == "{{u}}"  # referenced, not copied


def test_scan_options_reach_the_scanner(h5file, tmp_path):
    out = tmp_path / "split.json"
    assert main(["scan", str(h5file), "-o", str(out), "--contiguous-chunk-bytes", "80",
                 "--inline-threshold", "0"]) == 0
    meta = json.loads(json.loads(out.read_text())["refs"]["b/.zarray"])
    assert meta["chunks"] == [10]  # 80 bytes of float64


def test_verify_and_info(h5file, tmp_path, capsys):
    out = tmp_path / "out.refs.json"
    main(["scan", str(h5file), "-o", str(out), "--inline-dataset-threshold", "0"])
    capsys.readouterr()
    assert main(["verify", str(h5file), str(out)]) == 0
    assert "3 exact" in capsys.readouterr().out
    assert main(["info", str(out)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["arrays"] == 3 and info["chunks_referenced"] >= 10


def test_verify_exits_1_on_a_difference(h5file, tmp_path, capsys):
    out = tmp_path / "out.refs.json"
    main(["scan", str(h5file), "-o", str(out), "--inline-dataset-threshold", "0"])
    refs = json.loads(out.read_text())
    refs["refs"]["a/0.0"], refs["refs"]["a/1.0"] = refs["refs"]["a/1.0"], refs["refs"]["a/0.0"]  # a wrong index
    out.write_text(json.dumps(refs))
    assert main(["verify", str(h5file), str(out)]) == 1
    assert "different" in capsys.readouterr().out


def test_errors_are_one_line_with_exit_2(tmp_path, capsys):
    bad = tmp_path / "not.h5"
    bad.write_bytes(b"this is not hdf5" * 100)
    assert main(["scan", str(bad), "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("refindex: error:") and "not an HDF5 file" in err[0]
    assert not (tmp_path / "x.json").exists()


def test_demo_runs_and_reads_back(tmp_path):
    """The demo writes the files the documentation's examples run on, and ends saying how to run
    ``refindex`` (after ``make demo`` it is in .venv/bin, not on the PATH: ``refindex: command not found``).
    Run as ``make demo`` runs it: a fresh interpreter in the clone (in this one, namespaces other tests
    loaded into pynwb would be cached in the NWB file it writes)."""
    import os
    import subprocess
    import sys

    import docfiles

    pytest.importorskip("pynwb")
    pytest.importorskip("netCDF4")
    bin_dir = os.path.dirname(sys.executable)
    clone = os.path.dirname(os.path.dirname(bin_dir))  # where `make demo` runs: the clone, .venv in it
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if os.path.realpath(p) != os.path.realpath(bin_dir))
    run = subprocess.run([sys.executable, "-m", "refindex", "demo", "--dir", str(tmp_path)], cwd=clone,
                         env={**os.environ, "PATH": path}, capture_output=True, text=True, timeout=300)
    out = run.stdout
    assert run.returncode == 0, run.stderr
    assert "verify: 42 datasets: 42 exact" in out and "verify: 5 datasets: 5 exact" in out
    assert "verify: 2 datasets: 2 exact" in out
    assert "pynwb: session 'refindex documentation session', acquisition ['ElectricalSeries'], 3 units" in out
    assert "mean tas 284.94 K (1 missing), time 2000-01-01 .. 2000-01-06" in out
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".refs.json")) == sorted(docfiles.FILES)
    venv = os.path.relpath(bin_dir, clone)  # .venv/bin
    assert out.splitlines()[-1] == (f"the command line: {venv}/refindex --help (it is not on your PATH; after "
                                    f"`source {venv}/activate` it is `refindex`)")


def test_info_reads_json_and_parquet_indexes_alike(h5file, tmp_path, capsys):
    import refindex

    refindex.scan_to_file(str(h5file), tmp_path / "x.json", inline_dataset_threshold=0)
    refindex.scan_to_file(str(h5file), tmp_path / "x.parq", format="parquet", inline_dataset_threshold=0)
    a, b = refindex.info(tmp_path / "x.json"), refindex.info(tmp_path / "x.parq")
    for key in ("groups", "arrays", "chunks_referenced", "bytes_referenced", "inline_chunks", "inline_bytes",
                "sources", "convention"):
        assert a[key] == b[key], key
    assert a["chunks_referenced"] == 11 and a["inline_chunks"] >= 1  # 10 chunks of a, one of b
    assert main(["info", str(tmp_path / "x.parq")]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "parquet"


def test_version_prints_the_installed_version_and_exits_0(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"refindex {version('refindex')}\n"


def test_verify_with_its_arguments_swapped_says_so(h5file, tmp_path, capsys):
    out = tmp_path / "data.h5.refs.json"
    assert main(["scan", str(h5file), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["verify", str(out), str(h5file)]) == 2
    err = capsys.readouterr().err
    assert err == (f"refindex: error: the arguments are swapped: {out} is a reference index and {h5file} an HDF5 "
                   f"file; give the HDF5 file first, then its index (refindex verify {h5file} {out})\n")


def test_an_hdf5_file_given_as_the_index_is_called_an_hdf5_file(h5file, tmp_path, capsys):
    """A file that starts with the HDF5 signature is never told it does not (the message once said both)."""
    from refindex.source import HDF5_SIGNATURE, describe

    copy = tmp_path / "copy.bin"  # a name that says nothing: its first bytes decide
    copy.write_bytes(h5file.read_bytes())
    assert main(["verify", str(h5file), str(copy)]) == 2
    err = capsys.readouterr().err
    assert err == f"refindex: error: {copy}: an HDF5 file where a reference index (JSON or parquet) was expected\n"
    assert describe(HDF5_SIGNATURE + b"\0" * 56) == "it is an HDF5 file"


def test_verify_against_the_index_of_another_file_names_that_file(h5file, tmp_path, capsys):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = np.arange(5)
    out = tmp_path / "other.refs.json"
    assert main(["scan", str(other), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["verify", str(h5file), str(out)]) == 2
    err = capsys.readouterr().err
    size, other_size = h5file.stat().st_size, other.stat().st_size
    assert err == (f"refindex: error: {h5file}: the index is of another file, {other}, and this one differs from "
                   f"it (size {other_size} -> {size}): give the file the index was made from, or index this one\n")


def test_the_demo_says_refindex_where_it_is_on_the_path(monkeypatch):
    import os
    import sys

    from refindex.demo import how_to_run

    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    assert how_to_run() == "the command line: refindex --help"
