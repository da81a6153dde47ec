"""P4: a scientist in a notebook opens a cloud-hosted NWB file and looks at it.

Two pynwb files on the latency store: the P2/P3 session (few, large objects) and one
shaped like large DANDI files (hundreds of TimeSeries, 1,000 ragged units).  Each reader
runs in a fresh process: imports first (not timed), then ``open`` (to an ``NWBFile``),
"first data" (``acquisition/ElectricalSeries.data[0:10000]``, one chunk) and
``to_dataframe()`` of the electrodes, units and trials tables, each timed apart and
with the store's request/byte counts of that step.  Readers: pynwb + h5py on the local
copy (the floor) or over ``remfile`` / an fsspec 8 MiB 'blockcache' file, and refindex's
``open_nwb`` with an index made beforehand, on the fly from the HDF5 URL, with its local
index cache warm, and on the local copy through a local index; and the h5py road
(issue #23): unchanged ``NWBHDF5IO(file=refindex.h5py_file(...))`` pre-indexed, on the fly
and with the index cache warm.  The h5py road's rows (and row d') start the clock after
``import pynwb, h5py, refindex`` alone: refindex's own lazy imports count as part of the
open, as a user waits for them.  After the tables, every reader reads the whole
ElectricalSeries.  Values (the first chunk's and the whole series' sha1, the DataFrames'
shapes and columns) are checked against a local pynwb read.  A last section measures the
pages: index size with and without them, and the cost of recording them in a local scan.
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
STEPS = ("open", "first", *TABLES, "whole")
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

    return refindex.open_nwb(index, storage_options=so, remote_options=so, reader="zarr")


def open_on_the_fly(url: str, so: dict[str, Any], cache: str):
    import refindex

    return refindex.open_nwb(url, storage_options=so, remote_options=so, cache=False, reader="zarr")


def open_scanned(url: str, so: dict[str, Any], cache: str):
    """What works before ``open_nwb`` takes HDF5 URLs: scan in memory, then open the refs."""
    import refindex

    return refindex.open_nwb(refindex.scan(url, storage_options=so), remote_options=so, reader="zarr")


def open_cached(url: str, so: dict[str, Any], cache: str):
    import refindex

    return refindex.open_nwb(url, storage_options=so, remote_options=so, cache=cache, reader="zarr")


def open_local_index(index: str, so: dict[str, Any], cache: str):
    import refindex

    return refindex.open_nwb(index, reader="zarr")


def open_zarr_road(index: str, so: dict[str, Any], cache: str):
    import refindex

    return refindex.open_nwb(index, storage_options=so, remote_options=so, reader="zarr")


def _h5py_road(target: str, **kw: Any):
    import refindex

    return _pynwb_read(file=refindex.h5py_file(target, **kw))


def open_road_index(index: str, so: dict[str, Any], cache: str):
    return _h5py_road(index, storage_options=so)


def open_road_fly(url: str, so: dict[str, Any], cache: str):
    return _h5py_road(url, storage_options=so, cache=False)


def open_road_fly_default(url: str, so: dict[str, Any], cache: str):
    """``h5py_file(url)`` as a user writes it: the index cache on (here a new, empty folder per run, so
    that every run is a first open); its index is made beside while the steps after the open run."""
    import tempfile

    fresh = Path(cache).parent / "first-opens"
    fresh.mkdir(exist_ok=True)
    return _h5py_road(url, storage_options=so, cache=tempfile.mkdtemp(dir=fresh))


def open_road_cached(url: str, so: dict[str, Any], cache: str):
    return _h5py_road(url, storage_options=so, cache=cache)


H5 = ("h5py", "pynwb")
HTTP = ("fsspec", "fsspec.implementations.http", "aiohttp")
RI = ("pynwb", "zarr", "hdmf_zarr.nwb_zarrv2", "fsspec.implementations.reference", "refindex", "refindex.read",
      "refindex.api", "refindex.pipeline", "refindex.codecs.decoders", "refindex.source")
USER = ("pynwb", "h5py", "refindex")  # what the user writes: the rest of refindex's imports count in the open
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
    "zarr_index": ("d'. zarr road (open_nwb reader='zarr'), pre-indexed, imports as h-j", USER, open_zarr_road),
    "road_index": ("h. h5py road, pre-indexed: NWBHDF5IO(file=h5py_file(index))", USER, open_road_index),
    "road_fly": ("i. h5py road on the fly (HDF5 URL, cache=False)", USER, open_road_fly),
    "road_fly_default": ("i'. h5py road on the fly, default cache: h5py_file(url), first open", USER,
                         open_road_fly_default),
    "road_cached": ("j. h5py road, index cache warm", USER, open_road_cached),
}
REMOTE = ("remfile", "fsspec", "fly", "scan", "cached", "road_fly", "road_fly_default", "road_cached")
CACHED = ("cached", "road_cached")  # timed with a cache an earlier process filled


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
    out["whole_digest"] = digest(step("whole", lambda: nwbfile.acquisition["ElectricalSeries"].data[:]))
    out["seconds"] = out["open_s"]
    return out


CHILDREN: dict[str, Callable[..., dict[str, Any]]] = {"read": child_read}


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
    # as README's published index is made: from the served URL, whose ETag the index records (an index
    # made from the local copy with url= has no validator of the remote file: its freshness check then
    # reads the fingerprint's bytes, one more round trip of up to 48 ranges; docs/freshness.md)
    refindex.scan_to_file(url, remote)
    refindex.scan_to_file(path, local)
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir()
    return remote, local, cache


def check(r: dict[str, Any], truth: dict[str, Any]) -> dict[str, Any]:
    """Mark a run WRONG when its first chunk or DataFrame shapes differ from the local pynwb read."""
    if r["status"] == "ok" and truth["status"] == "ok":
        wrong = [k for k in ("digest", "tables", "whole_digest") if r.get(k) != truth.get(k)]
        if wrong:
            r["status"], r["error"] = "WRONG", f"{' and '.join(wrong)} differ from a local pynwb read"
    return r


def measure_file(path: Path, store: LatencyStore, timeout: float, repeat: int) -> dict[str, dict[str, Any]]:
    """Every reader on one file, ``repeat`` fresh processes each, interleaved."""
    me = os.path.abspath(__file__)
    url = store.url(path.name)
    remote_index, local_index, cache = prepare(path, url)
    index_url = store.url(f"p4/{remote_index.name}")
    targets = {"local": str(path), "index": index_url, "zarr_index": index_url, "road_index": index_url,
               "local_index": str(local_index)}
    jobs = {key: (me, "read", [key, targets.get(key, url), store.counts_url, str(cache)]) for key in READERS}
    truth = run_child(me, "read", jobs["local"][2], timeout)
    # (f) and (j) are timed with the cache an earlier process filled (not timed)
    fills = {key: run_child(me, "read", jobs[key][2], timeout) for key in CACHED}
    for key, fill in fills.items():
        if fill["status"] != "ok":
            del jobs[key]

    def measure(key: str, script: str, child: str, args: list[str]) -> dict[str, Any]:
        return check(run_child(script, child, args, timeout), truth)  # children count their own steps

    medians = tuple(f"{s}_{x}" for s in STEPS for x in ("s", "requests", "mb")) + ("import_s",)
    res = run_repeated(jobs, repeat, timeout, measure, medians)
    for key, fill in fills.items():
        if fill["status"] != "ok":
            res[key] = {"status": fill["status"], "error": f"filling the cache: {fill.get('error')}"}
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
            rows.append([label, r["status"], *[None] * 10, _cell(r.get("error", ""))])
            continue
        rows.append([label, "ok", r["open_s"], r["open_requests"], round(r["open_mb"], 2), r["first_s"],
                     r["first_requests"], *(r[f"{t}_s"] for t in TABLES), r["whole_s"], round(r["whole_mb"], 1),
                     " ".join(f"{x:.2f}" for x in r["runs"])])
        steps.append([label, *(r[f"{s}_requests"] for s in STEPS), f"{r['import_s']:.2f}"])
    return [f"#### {title}: `{path.name}`, {path.stat().st_size / 1e6:.0f} MB", "",
            table(["reader", "status", "open s", "requests", "MB", "first data s", "first data requests",
                   "electrodes df s", "units df s", "trials df s", "whole series s", "whole series MB",
                   "runs (open s)"], rows), "",
            "Requests per step, and the imports done before the clock started:", "",
            table(["reader", "open", "first data", "electrodes df", "units df", "trials df", "whole series",
                   "imports s"], steps), "",
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
    out += road_goals(res)
    for key in REMOTE:
        r = res[key]
        if _ok(r) and _ok(d):
            out.append(f"- {READERS[key][0]}: open {r['open_s'] / d['open_s']:.1f}x (d)'s time, "
                       f"{r['open_requests'] / max(1, d['open_requests']):.1f}x its requests, "
                       f"{r['open_mb'] / max(1e-6, d['open_mb']):.1f}x its MB; "
                       f"first data {r['first_s'] / d['first_s']:.1f}x")
    return out


def road_goals(res: dict[str, dict[str, Any]]) -> list[str]:
    """Issue #23's targets for the h5py road (h, i), from this run's medians."""
    a, h, i, zr, c = res["local"], res["road_index"], res["road_fly"], res["zarr_index"], res["fsspec"]
    i2 = res["road_fly_default"]
    return [
        _goal("h5py road pre-indexed (h) within 0.1 s of the local floor (a), <= 2 requests", [a, h],
              lambda: f"{h['open_s'] - a['open_s']:+.3f} s, {h['open_requests']} requests",
              lambda: h["open_s"] - a["open_s"] <= 0.1 and h["open_requests"] <= 2),
        _goal("h5py road on the fly (i) within 0.5 s of the local floor", [a, i],
              lambda: f"{i['open_s'] - a['open_s']:+.2f} s", lambda: i["open_s"] - a["open_s"] <= 0.5),
        _goal("h5py road on the fly with the default cache (i') within 0.5 s of the local floor", [a, i2],
              lambda: f"{i2['open_s'] - a['open_s']:+.2f} s", lambda: i2["open_s"] - a["open_s"] <= 0.5),
        _goal("whole ElectricalSeries through h5py_file (h) at least as fast as the zarr road (d')", [h, zr],
              lambda: f"{h['whole_s']:.3f} s vs {zr['whole_s']:.3f} s", lambda: h["whole_s"] <= zr["whole_s"]),
        blockcache_goal(h, c),
    ] + ([f"- open: h5py road (h) {h['open_s']:.3f} s against the zarr road (d') {zr['open_s']:.3f} s "
          f"({h['open_s'] / zr['open_s']:.2f}x), both pre-indexed, same imports (a comparison, no goal)"]
         if _ok(h) and _ok(zr) else [])


def blockcache_goal(h: dict[str, Any], c: dict[str, Any]) -> str:
    """The whole series through h5py_file (h) >= 4x h5py + fsspec's block cache (c): decided here only when (c)
    fetched the series for its read; when its open already downloaded it (a file of a few 8 MiB blocks), (c)
    reads from memory, and P3, which reads the series alone, decides."""
    text = "whole ElectricalSeries through h5py_file (h) >= 4x h5py + fsspec blockcache (c)"
    if _ok(h) and _ok(c) and not c["whole_mb"]:
        return (f"- {text}: not decided here, (c)'s open fetched the series with the file's first blocks "
                f"({c['whole_s']:.3f} s from memory against (h) {h['whole_s']:.3f} s); P3 decides")
    return _goal(text, [h, c], lambda: f"{c['whole_s'] / h['whole_s']:.1f}x",
                 lambda: c["whole_s"] >= 4 * h["whole_s"])


def pages_section(paths: list[Path], repeat: int, timeout: float) -> list[str]:
    """What the pages cost: index size with and without them, and a local scan's time with and without."""
    me = os.path.abspath(__file__)
    jobs = {f"{p.name}:{pages}": (me, "scan", [str(p), str(pages)]) for p in paths for pages in (1, 0)}
    res = run_repeated(jobs, repeat, timeout, medians=("bytes",))
    rows = []
    for p in paths:
        on, off = res[f"{p.name}:1"], res[f"{p.name}:0"]
        if not (_ok(on) and _ok(off)):
            rows.append([p.name, (on if not _ok(on) else off).get("error", "fail"), None, None, None, None, None])
            continue
        rows.append([p.name, off["bytes"], on["bytes"], f"{on['bytes'] / off['bytes']:.2f}x",
                     on["pages_bytes"], f"{off['seconds']:.3f}", f"{on['seconds']:.3f}"])
    return ["#### The pages: index size and local scan time (v2 JSON, medians of fresh processes)", "",
            table(["file", "index bytes without pages", "with pages", "ratio", "file bytes carried",
                   "local scan s without", "with (recorded)"], rows), ""]


def child_scan(path: str, pages: str) -> dict[str, Any]:
    """One local scan to a JSON index, timed (imports apart); its size."""
    import tempfile

    import refindex
    import refindex.api  # noqa: F401 - imports are not the scan
    import refindex.pipeline  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "index.json")
        t = time.perf_counter()
        refindex.scan_to_file(path, out, pages=bool(int(pages)))
        seconds = time.perf_counter() - t
        size = os.path.getsize(out)
        info = refindex.info(out)
    return {"seconds": seconds, "bytes": size, "pages_bytes": (info.get("pages") or {}).get("bytes")}


CHILDREN["scan"] = child_scan

PAGES_GOAL = 1.3  # index size with pages at most this multiple of the index without (issue #23)


def corpus_pages_section(timeout: float) -> list[str]:
    """Index size with and without pages over the test corpus, by project (sizes do not vary: one run)."""
    res = run_child(os.path.abspath(__file__), "corpus-pages", [], timeout)
    if not _ok(res):
        return [f"(corpus pages: {res.get('error') or res.get('status')})", ""]
    if not res["files"]:
        return ["(corpus pages: no corpus here; tests/corpus.py says where it is looked for)", ""]
    by: dict[str, list[int]] = {}
    for rel, (without, with_pages, in_file) in res["files"].items():
        counts = by.setdefault(rel.split("/")[0], [0, 0, 0, 0])
        counts[0] += 1
        counts[1] += without
        counts[2] += with_pages
        counts[3] += in_file
    rows = [[project, n, in_file, without, with_pages, f"{with_pages / without:.3f}x",
             verdict(with_pages <= PAGES_GOAL * without)]
            for project, (n, without, with_pages, in_file) in sorted(by.items(), key=lambda kv: -kv[1][2] / kv[1][1])]
    total = [sum(v[i] for v in by.values()) for i in range(4)]
    rows.append(["all", total[0], total[3], total[1], total[2], f"{total[2] / total[1]:.3f}x",
                 verdict(total[2] <= PAGES_GOAL * total[1])])
    return ["#### The pages over the test corpus, by project (v2 JSON index bytes)", "",
            f"Every HDF5 file of the corpus scanned with and without pages (goal: with <= {PAGES_GOAL}x without). "
            "'fetched whole': files small enough that their index carries none of their bytes and a reader "
            "fetches the file in its freshness check's round trip instead.", "",
            table(["project", "files", "fetched whole", "index bytes without pages", "with pages", "ratio",
                   f"<= {PAGES_GOAL}x"], rows), ""]


def child_corpus_pages() -> dict[str, Any]:
    """Every corpus file's JSON index size with and without pages; whether its pages are fetched whole."""
    import json
    import tempfile
    import warnings

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from corpus import CORPUS, manifest_rows

    import refindex

    out: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for row in manifest_rows():
            path = CORPUS / row["relpath"]
            sizes = []
            try:
                for pages in (False, True):
                    target = os.path.join(tmp, "index.json")
                    refindex.scan_to_file(str(path), target, pages=pages, on_unsupported="skip")
                    sizes.append(os.path.getsize(target))
            except refindex.RefindexError:  # not HDF5 (the corpus holds a few on purpose), or unreadable
                continue
            with open(target) as fh:
                in_file = bool(json.load(fh)["refindex"]["pages"].get("in_file"))
            out[row["relpath"]] = [*sizes, int(in_file)]
    return {"files": out}


CHILDREN["corpus-pages"] = child_corpus_pages


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
           "table's `to_dataframe()`, then the whole ElectricalSeries (`data[:]`). (d), (f), (g), (h) and (j) "
           "use indexes or caches made beforehand, not timed. Rows d' and h-j start the clock after `import "
           "pynwb, h5py, refindex` alone (refindex's own imports count); the others after the imports listed "
           "in the second table's last column.", ""]
    for title, path, res in results:
        txt += file_section(title, path, res)
    txt += pages_section([path for _, path, _ in results], a.repeat, a.timeout)
    txt += corpus_pages_section(a.timeout)
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
