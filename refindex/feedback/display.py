"""HTML for notebooks: what users look at (reports, summaries, read statistics) as small tables.

Jupyter shows an object's ``_repr_html_()`` instead of its ``repr``; the reports of refindex
(:class:`~refindex.VerifyReport`, :class:`~refindex.BatchReport`, :class:`~refindex.CheckReport`,
``refindex.info``'s summary, a store's ``stats``) build theirs with these two functions.
Plain HTML, every value escaped, no scripts or styles beyond inline ones (notebooks
sanitize the rest), long tables cut at ``limit`` rows with the count left out said.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

ROWS_SHOWN = 50
_OK, _BAD = "#1a7f37", "#cf222e"


def cell(value: Any) -> str:
    """One value as escaped text: numbers with thousands separators, lists joined, None as a dash."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, (list, tuple, set)):
        return html.escape(", ".join(str(v) for v in value)) or "–"
    if isinstance(value, Mapping):
        return html.escape(", ".join(f"{k}: {v}" for k, v in value.items())) or "–"
    return html.escape(str(value))


def verdict(ok: bool, text: str) -> str:
    """``text`` in green (ok) or red, with a check mark or a cross."""
    return f'<span style="color:{_OK if ok else _BAD}">{"✔" if ok else "✘"} {html.escape(text)}</span>'


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str = "", note: str = "",
          limit: int = ROWS_SHOWN) -> str:
    """A titled HTML table; ``title`` and ``note`` are HTML already (escape what they quote)."""
    rows = list(rows)
    head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in header)
    head = f"<thead><tr>{head}</tr></thead>" if any(header) else ""
    body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{cell(v)}</td>" for v in r) + "</tr>"
                   for r in rows[:limit])
    more = (f"<tr><td colspan='{len(header)}'>… {len(rows) - limit:,} more rows</td></tr>"
            if len(rows) > limit else "")
    return (f"<div class='refindex'>{f'<p><b>{title}</b></p>' if title else ''}"
            f"<table>{head}<tbody>{body}{more}</tbody></table>"
            f"{f'<p>{note}</p>' if note else ''}</div>")


def fields(pairs: Mapping[str, Any] | Iterable[tuple[str, Any]], *, title: str = "") -> str:
    """A two-column table of name and value."""
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    return table(["", ""], [(name, value) for name, value in items], title=title)
