"""Seeded, time-bounded mutation fuzz of the scanner over small real corpus files.

Every mutated file (bit flips, truncation, zeroed/0xFF ranges) must end in an index
that reads back exactly what h5py reads, or in a RefindexError; never an interpreter
crash, a hang, a non-RefindexError exception or partial output.  Each case runs in
one reused worker process (refindex.isolate), so a crash or hang inside libhdf5
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
    report = fuzz.run(files, str(tmp_path), seed=20240611, per_file=25, budget=45.0, timeout=8.0,
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
