"""benchmarks/charts.py: the P-tables of RESULTS.md as peer/refindex ratios, generic over the tables."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_charts", ROOT / "benchmarks" / "charts.py")
charts = sys.modules["bench_charts"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(charts)  # charts.py imports nothing of benchmarks/: no sys.path change

NEW_BENCHMARK = """\
# refindex benchmarks

### P9 something new: a table no chart code has seen

| tool | status | wall s | peak RSS MB | requests | note |
|---|---|---|---|---|---|
| baseline | ok | 0 | 60 | – | |
| refindex | ok | 0.5 | 100 | 4 | runs 0.5 0.5 |
| refindex, old cache | ok | 1 | 100 | 8 | |
| other tool | ok | 2 | 300 | 4 | |
| third tool | hang | – | – | 40 | killed |

#### per input

| input | tool | wall s | chunks |
|---|---|---|---|
| small | refindex (new) | 1 | 10 |
| small | other (new) | 3 | 10 |
| big | refindex (new) | 10 | 100 |
| big | other (new) | 20 | 100 |
"""


def test_a_new_benchmark_charts_without_new_code(tmp_path):
    tables = charts.parse_tables(NEW_BENCHMARK)
    assert [t.name for t in tables] == ["P9 something new", "P9 something new per input"]
    first = charts.chart_of(tables[0])
    assert first.metrics == ["wall s", "peak RSS MB"]  # requests: every ratio 1, left out
    assert [(b.peer, b.reference, b.ratios) for b in first.bars] == [
        ("other tool", "refindex", {"wall s": 4.0, "peak RSS MB": 3.0})]  # baseline and refindex rows are no peers
    assert first.failed == [("third tool", "hang")]
    second = charts.chart_of(tables[1])
    assert [(b.peer, b.ratios) for b in second.bars] == [("small · other (new)", {"wall s": 3.0}),
                                                         ("big · other (new)", {"wall s": 2.0})]  # within its input
    results = tmp_path / "RESULTS.md"
    results.write_text(NEW_BENCHMARK)
    pytest.importorskip("matplotlib")
    written = charts.write_charts(str(results), str(tmp_path / "charts"))
    assert [Path(p).name for p in written] == ["p9-something-new.png", "p9-something-new-per-input.png"]
    assert all(Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and Path(p).stat().st_size > 5000 for p in written)


def test_the_committed_results_chart_against_the_right_peers():
    """On benchmarks/RESULTS.md: every P-table that compares has a chart, each peer its matching refindex row."""
    tables = charts.parse_tables((ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8"))
    got = {}
    for t in tables:
        chart = charts.chart_of(t)
        if chart is not None and charts.slug(t.name) not in got:
            got[charts.slug(t.name)] = chart
    assert {"p1-local-scan", "p2-remote-index", "p3-remote-read", "p4-notebook-open-few-objects",
            "p6-output-formats-and-icechunk"} <= set(got)
    p1 = {b.peer: b for b in got["p1-local-scan"].bars}
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    wall = {name: float(re.search(rf"^\| {re.escape(name)} \| ok \| ([0-9.]+) \|", text, re.M).group(1))
            for name in ("kerchunk", "refindex json")}  # P1's rows: the first table naming them
    assert p1["kerchunk"].reference == "refindex json"
    assert p1["kerchunk"].ratios["wall s"] == pytest.approx(wall["kerchunk"] / wall["refindex json"])
    assert ("kerchunk (fsspec 'first')", "hang") in got["p2-remote-index"].failed
    p4 = {b.peer[:2]: b.reference for b in got["p4-notebook-open-few-objects"].bars}
    assert p4 == {"a.": "g. refindex, local file through a local index", "b.": "d. refindex, pre-indexed",
                  "c.": "d. refindex, pre-indexed", "d'": "d. refindex, pre-indexed", "h.": "d. refindex, pre-indexed",
                  "i.": "e. refindex on the fly (HDF5 URL, cache=False)",
                  "i'": "e. refindex on the fly (HDF5 URL, cache=False)", "j.": "f. refindex, index cache warm"}
    p6 = {b.peer: b.reference for b in got["p6-output-formats-and-icechunk"].bars}
    assert p6 == {"Icechunk (VirtualiZarr)": "Icechunk (refindex)"}
    shown = {p.stem for p in (ROOT / "benchmarks" / "charts").glob("*.png")}
    assert set(got) == shown, "benchmarks/charts/ is not what RESULTS.md charts to: run make charts"
