"""Charts of benchmarks/RESULTS.md: every table's peers as a multiple of refindex's cost (``make bench``).

Generic over the tables every benchmark writes (``common.table``), so a new benchmark charts
without new code.  In each table under a ``###``/``####`` heading:

* the rows naming refindex (in any text cell) are refindex's; the others are its peers;
* a text column holding "refindex" in some row is the *tool* column; text columns before it
  (an input, a file) group the rows, and peers are compared within their group;
* each peer is compared with the refindex row whose label shares most words with its own
  (P6's "Icechunk (VirtualiZarr)" with "Icechunk (refindex)", P4's local floor with the
  local read through an index), else with the group's first refindex row;
* every numeric column (lower is better: seconds, MB, requests, bytes) is a metric,
  left out where refindex's value is 0, where every ratio is 1, or where it repeats
  another metric's ratios; ``runs``/``note``/``status``/``load`` columns are not metrics;
* a peer whose status is not ``ok`` (hang, timeout, crash, WRONG) is named under the chart.

Rows labelled ``baseline`` (a bare interpreter) are context, not peers.  Bars are peer /
refindex on a log scale: right of 1 the peer costs more.  One PNG per heading (its first table
that compares), ``<heading's lead words>.png`` in ``benchmarks/charts/`` (docs/benchmarks.md
shows them).

    python benchmarks/charts.py [RESULTS.md] [--out DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
NOT_METRICS = {"runs", "note", "status", "runs (open s)", "load", "files/hour"}  # load: the machine's, not a tool's;
# files/hour: a rate (higher is better), the inverse of the seconds beside it
_WORD = re.compile(r"[a-z0-9]+")
_IGNORED_WORDS = {"refindex", "the", "and", "with", "via", "for", "its"}


@dataclass
class Table:
    heading: str  # the nearest ### / #### heading, markdown removed
    name: str  # short: the heading's words before its first ":" or "(" (a #### one after its section's)
    header: list[str]
    rows: list[list[str]]


@dataclass
class Bar:
    peer: str
    reference: str
    ratios: dict[str, float]  # metric -> peer / refindex


@dataclass
class Chart:
    title: str
    metrics: list[str]
    bars: list[Bar]
    failed: list[tuple[str, str]] = field(default_factory=list)  # (peer, status)


def plain(text: str) -> str:
    return re.sub(r"[`*]", "", text).strip()


def parse_tables(markdown: str) -> list[Table]:
    """Every pipe table of a Markdown document, with the heading it sits under."""
    tables: list[Table] = []
    heading = section = name = ""
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("### "):
            section = heading = plain(line[4:])
            name = _lead(heading)
        elif line.startswith("#### "):
            heading = f"{_lead(section)}: {plain(line[5:])}"
            name = f"{_lead(section)} {_lead(plain(line[5:]))}"
        elif line.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1].strip()):
            header = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(_cells(lines[i].strip()))
                i += 1
            tables.append(Table(heading, name, header, [r for r in rows if len(r) == len(header)]))
            continue
        i += 1
    return tables


def _lead(heading: str) -> str:
    return re.split(r"[:(]", heading, maxsplit=1)[0].strip()


def _cells(line: str) -> list[str]:
    return [plain(c) for c in line.strip().strip("|").split("|")]


def number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _words(label: str) -> set[str]:
    return {w for w in _WORD.findall(label.lower()) if len(w) >= 3 and w not in _IGNORED_WORDS}


def _closest(peer: str, candidates: list[list[str]], tool: int) -> list[str]:
    """The refindex row sharing most words with ``peer`` (the first on a tie)."""
    words = _words(peer)
    return max(candidates, key=lambda r: (len(words & _words(r[tool])), -candidates.index(r)))


def chart_of(table: Table) -> Chart | None:
    """The comparison a table holds, or None when it holds none (no refindex row, no peer, no metric)."""
    header = [h.lower() for h in table.header]
    tool = next((c for c in range(len(header)) if number(table.rows[0][c] if table.rows else "") is None
                 and any("refindex" in r[c].lower() for r in table.rows)), None)
    if tool is None:
        return None
    status = header.index("status") if "status" in header else None
    metrics = [c for c, h in enumerate(header) if h not in NOT_METRICS and c != tool
               and any(number(r[c]) is not None for r in table.rows)]
    groups = [c for c, h in enumerate(header[:tool]) if c not in metrics and c != status and h not in NOT_METRICS]
    chart = Chart(table.heading, [table.header[c] for c in metrics], [])
    for row in table.rows:
        if "refindex" in row[tool].lower() or row[tool].lower() == "baseline":  # baseline: the bare interpreter
            continue
        if status is not None and row[status] != "ok":
            chart.failed.append((row[tool], row[status]))
            continue
        ours = [r for r in table.rows if "refindex" in r[tool].lower() and all(r[g] == row[g] for g in groups)
                and (status is None or r[status] == "ok")]
        if not ours:
            continue
        ref = _closest(row[tool], ours, tool)
        ratios = {}
        for c in metrics:
            mine, theirs = number(ref[c]), number(row[c])
            if mine and theirs is not None and mine > 0 and theirs > 0:
                ratios[table.header[c]] = theirs / mine
        label = " · ".join([row[g] for g in groups] + [row[tool]])
        chart.bars.append(Bar(label, ref[tool], ratios))
    _drop_uninformative(chart)
    return chart if chart.bars and chart.metrics else None


def _drop_uninformative(chart: Chart) -> None:
    """Metrics with no ratio, with every ratio 1, or repeating an earlier metric's ratios (to two digits) are left out."""
    kept: list[str] = []
    seen: list[list[float]] = []
    for m in chart.metrics:
        values = [float(f"{b.ratios[m]:.2g}") for b in chart.bars if m in b.ratios]  # as the bars label them
        if not values or all(v == 1 for v in values) or values in seen:
            continue
        seen.append(values)
        kept.append(m)
    chart.metrics = kept
    for b in chart.bars:
        b.ratios = {m: v for m, v in b.ratios.items() if m in kept}
    chart.bars = [b for b in chart.bars if b.ratios]


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "table"


def draw(chart: Chart, path: str) -> None:
    """One horizontal grouped bar chart: a group per peer, a bar per metric, log x, a line at 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    n, k = len(chart.bars), len(chart.metrics)
    height = 0.8 / k
    fig, ax = plt.subplots(figsize=(9, 1.0 + n * (0.35 + 0.22 * k) + 0.25 * len(chart.failed)))
    colors = plt.get_cmap("tab10").colors
    for j, metric in enumerate(chart.metrics):
        ys = [i + (j - (k - 1) / 2) * height for i in range(n)]
        vals = [b.ratios.get(metric, math.nan) for b in chart.bars]
        ax.barh(ys, vals, height=height * 0.9, color=colors[j % 10], label=metric)
        for y, v in zip(ys, vals):
            if not math.isnan(v):
                ax.annotate(f"{v:.2g}×", (v, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.axvline(1, color="black", linewidth=1)
    ax.set_yticks(range(n), [f"{_short(b.peer)}\n÷ {_short(b.reference)}" for b in chart.bars], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("peer ÷ refindex (log scale; right of 1: the peer costs more)")
    ax.set_title(_short(chart.title, 90), fontsize=10)
    ax.legend(fontsize=7, loc="best")
    if chart.failed:
        fig.text(0.01, 0.01, "not charted: " + "; ".join(f"{_short(p, 40)} ({s})" for p, s in chart.failed),
                 fontsize=7, color="#cf222e")
    fig.tight_layout(rect=(0, 0.03 if chart.failed else 0, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def write_charts(results: str, out: str) -> list[str]:
    """A PNG per chartable table of ``results`` into ``out`` (older charts there are replaced); their paths."""
    with open(results, encoding="utf-8") as fh:
        tables = parse_tables(fh.read())
    os.makedirs(out, exist_ok=True)
    for old in os.listdir(out):
        if old.endswith(".png"):
            os.remove(os.path.join(out, old))
    written: list[str] = []
    names: set[str] = set()
    for table in tables:
        name = slug(table.name)
        chart = None if name in names else chart_of(table)  # one chart per heading: its first comparison
        if chart is None:
            continue
        names.add(name)
        path = os.path.join(out, name + ".png")
        draw(chart, path)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> list[str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="?", default=os.path.join(HERE, "RESULTS.md"))
    p.add_argument("--out", help="folder for the PNGs (default: charts/ beside the results)")
    a = p.parse_args(argv)
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(a.results)), "charts")
    paths = write_charts(a.results, out)
    for path in paths:
        print(f"wrote {path}", file=sys.stderr)
    return paths


if __name__ == "__main__":
    main()
