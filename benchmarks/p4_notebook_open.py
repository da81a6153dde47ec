"""P4: a scientist in a notebook opens a cloud-hosted NWB file and looks at it.

Two pynwb files on the latency store: the P2/P3 session (few, large objects) and one
shaped like large DANDI files (hundreds of TimeSeries, 1,000 ragged units).  Each reader
runs in a fresh process: imports first (not timed), then ``open`` (to an ``NWBFile``),
"first data" (``acquisition/ElectricalSeries.data[0:10000]``, one chunk) and
``to_dataframe()`` of the electrodes, units and trials tables, each timed apart and
with the store's request/byte counts of that step.  Readers: pynwb + h5py on the local
copy (the floor) or over ``remfile`` / an fsspec 8 MiB 'blockcache' file, and refindex's
``open_nwb`` with an index made beforehand, on the fly from the HDF5 URL, with its local
index cache warm, and on the local copy through a local index.  Values (the first chunk's
sha1, the DataFrames' shapes and columns) are checked against a local pynwb read.
Defaults are small (a couple of minutes); ``--full`` runs the issue's sizes.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import add_session_args, child_main, digest, run_child, run_repeated, table, verdict  # noqa: E402
from latency_store import LatencyStore, fetch_counts, http_storage_options  # noqa: E402

MiB = 1 << 20
TABLES = ("electrodes", "units", "trials")
STEPS = ("open", "first", *TABLES)
QUICK = {"samples": 30_000, "frames": 50, "series": 30, "series_samples": 5_000, "units": 100}
FULL = {"samples": 300_000, "frames": 850, "series": 300, "series_samples": 20_000, "units": 1000}
_KEEP: list[Any] = []  # IO objects and open files: lazy datasets read through them after open


# ------------------------------------------------------------------ openers (child side)
def _pynwb_read(**io_kwargs: Any):
    from pynwb import NWBHDF5IO

    io = NWBHDF5IO(mode="r", **io_kwargs)
    _KEEP.append(io)
    return io.read()


def open_local(path: str, so: dict[str, Any], cache: str):
    return _pynwb_read(path=path)


def open_remfile(url: str, so: dict[str, Any], cache: str):
    import h5py
    import remfile

    return _pynwb_read(file=h5py.File(remfile.File(url), "r"))


def open_fsspec(url: str, so: dict[str, Any], cache: str):
    import fsspec
    import h5py

    fh = fsspec.filesystem("http", **so).open(url, "rb", cache_type="blockcache", block_size=8 * MiB)
    _KEEP.append(fh)
    return _pynwb_read(file=h5py.File(fh, "r"))


def open_index(index: str, so: dict[str, Any], cache: str):
    import refindex

    return refindex.open_nwb(index, storage_options=so, remote_options=so)


def open_on_the_fly(url: str, so: dict[str, Any], cache: str):
    import refindex

    return refindex.open_nwb(url, storage_options=so, remote_options=so, cache=False)


def open_scanned(url: str, so: dict[str, Any], cache: str):
    """What works before ``open_nwb`` takes HDF5 URLs: scan in memory, then open the refs."""
    import refindex

    return refindex.open_nwb(refindex.scan(url, storage_options=so), remote_options=so)


def open_cached(url: str, so: dict[str, Any], cache: str):
    import refindex

    return refindex.open_nwb(url, storage_options=so, remote_options=so, cache=cache)


def open_local_index(index: str, so: dict[str, Any], cache: str):
    import refindex

    return refindex.open_nwb(index)


H5 = ("h5py", "pynwb")
HTTP = ("fsspec", "fsspec.implementations.http", "aiohttp")
RI = ("pynwb", "zarr", "hdmf_zarr.nwb_zarrv2", "fsspec.implementations.reference", "refindex", "refindex.read",
      "refindex.api", "refindex.pipeline", "refindex.codecs.decoders", "refindex.source")
# key -> (row label, modules imported before the clock starts, opener); rows print in this order
READERS: dict[str, tuple[str, tuple[str, ...], Callable[[str, dict[str, Any], str], Any]]] = {
    "local": ("a. pynwb + h5py, local file (floor)", H5, open_local),
    "remfile": ("b. pynwb + h5py + remfile", (*H5, "remfile"), open_remfile),
    "fsspec": ("c. pynwb + h5py + fsspec 8 MiB 'blockcache'", (*H5, *HTTP), open_fsspec),
    "index": ("d. refindex, pre-indexed", (*RI, *HTTP), open_index),
    "fly": ("e. refindex on the fly (HDF5 URL, cache=False)", (*RI, *HTTP), open_on_the_fly),
    "scan": ("e'. refindex scan, then open", (*RI, *HTTP), open_scanned),
    "cached": ("f. refindex, index cache warm", (*RI, *HTTP), open_cached),
    "local_index": ("g. refindex, local file through a local index", RI, open_local_index),
}
REMOTE = ("remfile", "fsspec", "fly", "scan", "cached")


# ------------------------------------------------------------------ measurement (child side)
def _frame_shape(df) -> list[Any]:
    return [list(df.shape), [str(c) for c in df.columns]]


def child_read(reader: str, target: str, counts_url: str, cache: str = "") -> dict[str, Any]:
    """Open with one reader, then look at the file; each step timed with the requests it made."""
    _label, modules, opener = READERS[reader]
    t0 = time.perf_counter()
    for m in modules:
        importlib.import_module(m)
    so = http_storage_options() if "aiohttp" in modules else {}
    out: dict[str, Any] = {"import_s": time.perf_counter() - t0}
    last = [fetch_counts(counts_url)]

    def step(name: str, fn: Callable[[], Any]) -> Any:
        t = time.perf_counter()
        value = fn()
        out[f"{name}_s"] = time.perf_counter() - t
        now = fetch_counts(counts_url)
        out[f"{name}_requests"] = now["requests"] - last[0]["requests"]
        out[f"{name}_mb"] = (now["bytes"] - last[0]["bytes"]) / 1e6
        last[0] = now
        return value

    nwbfile = step("open", lambda: opener(target, so, cache))
    out["digest"] = digest(step("first", lambda: nwbfile.acquisition["ElectricalSeries"].data[0:10000]))
    out["tables"] = {t: _frame_shape(step(t, lambda: getattr(nwbfile, t).to_dataframe())) for t in TABLES}
    out["seconds"] = out["open_s"]
    return out


CHILDREN = {"read": child_read}


# ------------------------------------------------------------------ driver (parent side)
def prepare(path: Path, url: str) -> tuple[Path, Path, Path]:
    """The indexes of (d) (chunks at ``url``) and (g) (chunks in the local file), and an
    empty cache folder for (f): made before anything is timed, again on every run since
    the store's port changes."""
    import refindex

    folder = path.parent / "p4"
    folder.mkdir(exist_ok=True)
    remote, local, cache = (folder / f"{path.stem}.json", folder / f"{path.stem}.local.json",
                            folder / f"cache-{path.stem}")
    refindex.scan_to_file(path, remote, url=url)
    refindex.scan_to_file(path, local)
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir()
    return remote, local, cache


def check(r: dict[str, Any], truth: dict[str, Any]) -> dict[str, Any]:
    """Mark a run WRONG when its first chunk or DataFrame shapes differ from the local pynwb read."""
    if r["status"] == "ok" and truth["status"] == "ok":
        wrong = [k for k in ("digest", "tables") if r.get(k) != truth.get(k)]
        if wrong:
            r["status"], r["error"] = "WRONG", f"{' and '.join(wrong)} differ from a local pynwb read"
    return r


def measure_file(path: Path, store: LatencyStore, timeout: float, repeat: int) -> dict[str, dict[str, Any]]:
    """Every reader on one file, ``repeat`` fresh processes each, interleaved."""
    me = os.path.abspath(__file__)
    url = store.url(path.name)
    remote_index, local_index, cache = prepare(path, url)
    targets = {"local": str(path), "index": store.url(f"p4/{remote_index.name}"), "local_index": str(local_index)}
    jobs = {key: (me, "read", [key, targets.get(key, url), store.counts_url, str(cache)]) for key in READERS}
    truth = run_child(me, "read", jobs["local"][2], timeout)
    # (f) is timed with the cache an earlier process filled (not timed)
    fill = run_child(me, "read", jobs["cached"][2], timeout)
    if fill["status"] != "ok":
        del jobs["cached"]

    def measure(key: str, script: str, child: str, args: list[str]) -> dict[str, Any]:
        return check(run_child(script, child, args, timeout), truth)  # children count their own steps

    medians = tuple(f"{s}_{x}" for s in STEPS for x in ("s", "requests", "mb")) + ("import_s",)
    res = run_repeated(jobs, repeat, timeout, measure, medians)
    if fill["status"] != "ok":
        res["cached"] = {"status": fill["status"], "error": f"filling the cache: {fill.get('error')}"}
    if truth["status"] != "ok":
        res["local"] = truth
    return {key: res[key] for key in READERS}


def _ok(r: dict[str, Any]) -> bool:
    return r["status"] == "ok"


def _cell(text: Any) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def file_section(title: str, path: Path, res: dict[str, dict[str, Any]]) -> list[str]:
    rows, steps = [], []
    for key, r in res.items():
        label = READERS[key][0]
        if not _ok(r):
            rows.append([label, r["status"], *[None] * 8, _cell(r.get("error", ""))])
            continue
        rows.append([label, "ok", r["open_s"], r["open_requests"], round(r["open_mb"], 2), r["first_s"],
                     r["first_requests"], *(r[f"{t}_s"] for t in TABLES), " ".join(f"{x:.2f}" for x in r["runs"])])
        steps.append([label, *(r[f"{s}_requests"] for s in STEPS), f"{r['import_s']:.2f}"])
    return [f"#### {title}: `{path.name}`, {path.stat().st_size / 1e6:.0f} MB", "",
            table(["reader", "status", "open s", "requests", "MB", "first data s", "first data requests",
                   "electrodes df s", "units df s", "trials df s", "runs (open s)"], rows), "",
            "Requests per step, and the imports done before the clock started:", "",
            table(["reader", "open", "first data", "electrodes df", "units df", "trials df", "imports s"], steps), "",
            *goals(res), ""]


def _goal(text: str, rows: list[dict[str, Any]], figure: Callable[[], str], ok: Callable[[], bool]) -> str:
    bad = next((r for r in rows if not _ok(r)), None)
    if bad is not None:
        return f"- {text}: {verdict(False)} ({bad['status']}: {_cell(bad.get('error', ''))[:120]})"
    return f"- {text}: {figure()} {verdict(ok())}"


def goals(res: dict[str, dict[str, Any]]) -> list[str]:
    """The issue's targets, from this run's medians; then each remote reader against (d)."""
    a, d, e, g = res["local"], res["index"], res["fly"], res["local_index"]
    out = [
        _goal("pre-indexed remote open (d) within 0.25 s of the local floor (a), <= 3 requests", [a, d],
              lambda: f"{d['open_s'] - a['open_s']:+.2f} s, {d['open_requests']} requests",
              lambda: d["open_s"] - a["open_s"] <= 0.25 and d["open_requests"] <= 3),
        _goal("on the fly (e) within 0.6 s of the local floor", [a, e],
              lambda: f"{e['open_s'] - a['open_s']:+.2f} s", lambda: e["open_s"] - a["open_s"] <= 0.6),
        _goal("local through the index (g) <= 1.2x the local floor", [a, g],
              lambda: f"{g['open_s'] / a['open_s']:.2f}x", lambda: g["open_s"] <= 1.2 * a["open_s"]),
    ]
    for t in TABLES:
        k = f"{t}_s"
        out.append(_goal(f"{t}.to_dataframe(): (g) <= 2x (a), (d) <= 0.1 s", [a, d, g],
                         lambda: f"(g) {g[k] / a[k]:.2f}x, (d) {d[k]:.3f} s",
                         lambda: g[k] <= 2 * a[k] and d[k] <= 0.1))
    h5 = [res[k] for k in ("remfile", "fsspec") if _ok(res[k])]
    best = min(h5, key=lambda r: r["first_s"]) if h5 else {"status": "fail", "error": "no h5py remote reader ran"}
    out.append(_goal("first data of (d) <= the fastest h5py remote reader's (b, c)", [d, best],
                     lambda: f"{d['first_s']:.3f} s vs {best['first_s']:.3f} s",
                     lambda: d["first_s"] <= best["first_s"]))
    for key in REMOTE:
        r = res[key]
        if _ok(r) and _ok(d):
            out.append(f"- {READERS[key][0]}: open {r['open_s'] / d['open_s']:.1f}x (d)'s time, "
                       f"{r['open_requests'] / max(1, d['open_requests']):.1f}x its requests, "
                       f"{r['open_mb'] / max(1e-6, d['open_mb']):.1f}x its MB; "
                       f"first data {r['first_s'] / d['first_s']:.1f}x")
    return out


def run(a: argparse.Namespace) -> str:
    from datafiles import OUT, nwb, nwb_many_objects

    files = [("few objects", nwb(samples=a.samples, frames=a.frames)),
             ("many objects", nwb_many_objects(series=a.series, series_samples=a.series_samples, units=a.units))]
    with LatencyStore(OUT, a.latency_ms / 1000, a.bandwidth_mbs * 1e6) as store:
        results = [(title, path, measure_file(path, store, a.timeout, a.repeat)) for title, path in files]
    txt = [f"### P4 notebook open: pynwb files on the latency store ({a.latency_ms:.0f} ms/request, "
           f"{a.bandwidth_mbs:.0f} MB/s per connection)", "",
           f"Each reader ran {a.repeat} times in fresh processes, interleaved; figures are medians. 'open' is "
           "the read to an NWBFile; requests and MB are what the store served during it (HEADs included). "
           "'first data' reads `acquisition/ElectricalSeries.data[0:10000]` (one chunk) right after; then each "
           "table's `to_dataframe()`. (d), (f) and (g) use indexes or caches made beforehand, not timed.", ""]
    for title, path, res in results:
        txt += file_section(title, path, res)
    return "\n".join(txt)


def main(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    if child_main(CHILDREN, argv):
        return ""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_session_args(p, timeout=300)
    p.set_defaults(samples=None, frames=None)  # None: from --full or the quick sizes
    p.add_argument("--series", type=int, help="TimeSeries in the many-objects file")
    p.add_argument("--series-samples", type=int, help="samples per TimeSeries")
    p.add_argument("--units", type=int, help="units in the many-objects file")
    p.add_argument("--full", action="store_true", help="the issue's sizes (122 MB and 33 MB files)")
    p.add_argument("--repeat", type=int, default=3, help="fresh processes per reader (median)")
    a = p.parse_args(argv)
    for key, value in (FULL if a.full else QUICK).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    t0 = time.perf_counter()
    text = run(a)
    print(text)
    print(f"(P4 took {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return text


if __name__ == "__main__":
    main()
