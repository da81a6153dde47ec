"""P9: an archive of small CF files as one dataset (issue #43): throughput, requests, memory, correctness.

The archive: ``--files`` daily netCDF-4 files as xarray writes them (h5netcdf; each file its own
time units, ``days since <its day>``), one variable ``tas`` (1, 76, 180) float32 in 4 chunks,
about 67 KB each, served by the latency store (30 ms per request, 50 MB/s per connection).

Tools, each in fresh processes, interleaved, medians (2 cores: pools of 2 as the issue ran them):
- refindex batch (JSON per file; ``--in-flight 1``: a file at a time as before issue #43; with
  ``--combine``; on a running Dask LocalCluster of 2, its start-up reported beside; the same files
  from local disk); with ``--baseline
  TREE`` also the refindex of another source tree (``git archive <commit> refindex | tar -x -C TREE``)
- kerchunk: ``SingleHdf5ToZarr`` in a ``Pool(2)`` (fsspec http, ``cache_type="first"``), then
  ``MultiZarrToZarr`` (``concat_dims=["time"]``, its default ``coo_map``)
- VirtualiZarr: ``open_virtual_dataset(loadable_variables=[])`` in a ``ProcessPoolExecutor(2)``,
  with its ``HDFParser`` and with refindex's parser

Per tool: seconds, files/hour, requests per file (the store's counts), peak RSS of the process
(its workers in ``workers MB``), and whether the combined dataset opened with xarray (default
decoding) is ``xr.testing.assert_identical`` to ``xr.open_mfdataset(files, engine="h5netcdf",
combine="by_coords")``.  Goals of issue #43 item 4, from the same run: >= 3x kerchunk, >= 6x
HDFParser, >= 2x refindex a file at a time (or the baseline tree), the same on Dask.

``--append 100`` adds an append: per output kind (JSON, parquet, Icechunk), a full run over ``--files`` +
100 files against the same command after a run over the first ``--files`` on the latency store speaking S3
(``--store http``: plain URLs, a HEAD per unchanged input) (time, requests, HEADs, CPU, what
the combine read; with ``--baseline`` also the baseline tree's append).  ``--curve 1000,10000`` adds the
whole batch's memory (coordinator and workers, sampled) combining local files into parquet; the files are
one template with its time value rewritten (100,000 take two minutes to write, the batch over them hours on
2 cores).  ``--skip-tools`` runs only those.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import HERE, child_main, fmt, median, run_child, table, timed, verdict  # noqa: E402

OUT = os.path.join(HERE, "out", "p9")
SHAPE, CHUNKS = (1, 76, 180), (1, 38, 90)


# ---------------------------------------------------------------- the archive
def _write(args: tuple[str, int]) -> None:
    import numpy as np
    import pandas as pd
    import xarray as xr

    path, day = args
    rng = np.random.default_rng(day)
    ds = xr.Dataset({"tas": (("time", "lat", "lon"), rng.normal(280, 10, SHAPE).astype("f4"),
                             {"units": "K", "standard_name": "air_temperature"})},
                    coords={"time": pd.date_range("2000-01-01", periods=1) + pd.Timedelta(days=day),
                            "lat": ("lat", np.linspace(-89, 89, SHAPE[1]), {"units": "degrees_north"}),
                            "lon": ("lon", np.arange(SHAPE[2]) * 2.0, {"units": "degrees_east"})})
    tmp = path + ".tmp"
    ds.to_netcdf(tmp, engine="h5netcdf", encoding={"tas": {"chunksizes": CHUNKS}})
    os.replace(tmp, path)


def archive(n: int) -> tuple[str, list[str]]:
    """The folder of ``n`` daily files (made once, kept under benchmarks/out/p9) and their names."""
    from multiprocessing import Pool

    folder = os.path.join(OUT, f"archive-{n}")
    os.makedirs(folder, exist_ok=True)
    names = [f"tas_{i:06d}.nc" for i in range(n)]
    todo = [(os.path.join(folder, x), i) for i, x in enumerate(names) if not os.path.exists(os.path.join(folder, x))]
    if todo:
        with Pool(2) as pool:
            pool.map(_write, todo, chunksize=64)
    return folder, names


CURVE_SHAPE, CURVE_CHUNKS = SHAPE, CHUNKS  # 54.7 KB of data: its 4 chunks are byte ranges, not inline
CURVE_MARK = 876543  # the template's time value (hours since 2000-01-01): 8 bytes found once in the file


def curve_template() -> bytes:
    """A CF file as P9's (``tas`` (1, 76, 180) float32 in 4 chunks, ``time`` int64 hours since 2000-01-01) whose
    time value is a marker found once in its bytes: each file of the curve is this file with that value
    rewritten (real, distinct HDF5 files, written at disk speed instead of xarray's)."""
    import numpy as np
    import pandas as pd
    import xarray as xr

    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "curve-template-2.nc")
    if not os.path.exists(path):
        ds = xr.Dataset({"tas": (("time", "lat", "lon"), np.random.default_rng(0).normal(280, 10, CURVE_SHAPE)
                                 .astype("f4"), {"units": "K", "standard_name": "air_temperature"})},
                        coords={"time": pd.DatetimeIndex([pd.Timestamp("2000-01-01") + pd.Timedelta(hours=CURVE_MARK)]),
                                "lat": ("lat", np.linspace(-89, 89, CURVE_SHAPE[1]), {"units": "degrees_north"}),
                                "lon": ("lon", np.arange(CURVE_SHAPE[2]) * 2.0, {"units": "degrees_east"})})
        ds.to_netcdf(path + ".tmp", engine="h5netcdf", encoding={"tas": {"chunksizes": CURVE_CHUNKS},
                                                                "time": {"units": "hours since 2000-01-01",
                                                                         "dtype": "i8"}})
        os.replace(path + ".tmp", path)
    with open(path, "rb") as fh:
        data = fh.read()
    if data.count(np.int64(CURVE_MARK).tobytes()) != 1:
        raise RuntimeError("the curve template's time value is not found exactly once")
    return data


def curve_archive(n: int) -> tuple[str, list[str]]:
    """``n`` hourly files (file i holds hour i) for the memory curve, made once under benchmarks/out/p9."""
    import numpy as np

    template = curve_template()
    mark = np.int64(CURVE_MARK).tobytes()
    at = template.index(mark)
    folder = os.path.join(OUT, f"curve2-{n}")
    os.makedirs(folder, exist_ok=True)
    names = [f"tas_{i:06d}.nc" for i in range(n)]
    have = set(os.listdir(folder))
    for i, x in enumerate(names):
        if x not in have:
            with open(os.path.join(folder, x), "wb") as fh:
                fh.write(template[:at] + np.int64(i).tobytes() + template[at + 8:])
    return folder, names


def identical(combined: str, files: list[str], remote_protocol: str | None = None) -> str:
    """"yes" when the combined index opened with xarray is identical to ``open_mfdataset`` of the files,
    else "no: <the first difference>"."""
    import xarray as xr

    so: dict[str, Any] = {"fo": combined}
    if remote_protocol:
        so.update(remote_protocol=remote_protocol, remote_options={"asynchronous": True})
    try:
        got = xr.open_dataset("reference://", engine="zarr", backend_kwargs={"storage_options": so,
                                                                              "consolidated": False})
        want = xr.open_mfdataset(files, engine="h5netcdf", combine="by_coords")
        xr.testing.assert_identical(got.load(), want.load())
    except AssertionError as e:
        return "no: " + " ".join(str(e).split())[:160]
    except Exception as e:  # noqa: BLE001 - cannot even open: not identical
        return f"no: {type(e).__name__}: {' '.join(str(e).split())[:140]}"
    return "yes"


# ---------------------------------------------------------------- measurements (child side)
def _counts(url: str) -> dict[str, int]:
    if not url:
        return {"requests": 0}
    from latency_store import fetch_counts

    return fetch_counts(url)


def _children_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)


def _children() -> list[int]:
    """Pids of this process's children (Linux)."""
    out: list[int] = []
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as fh:
                out += [int(x) for x in fh.read().split()]
    except OSError:
        pass
    return out


def _cpu_seconds() -> float:
    """CPU time (user + system) of this process and its children: on a shared machine a steadier measure of
    the work than wall time (the latency store, in the parent, is not in it).  Children still exiting (a
    batch's workers end when their pipe closes) are waited for first, or their time would be missing."""
    for pid in _children():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"resource_tracker" in fh.read():  # multiprocessing's: it ends with this process
                    continue
            os.waitpid(pid, 0)
        except (OSError, ChildProcessError):
            continue
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return round(own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime, 2)


def child_refindex(inputs: str, out: str, counts_url: str, mode: str) -> dict[str, Any]:
    """``refindex batch`` over the inputs (a list file): ``mode`` json / one-at-a-time / combine / parquet / dask."""
    import refindex  # noqa: F401 - imported before the clock starts, as the CLI would be
    from refindex.batch import run_batch

    kw: dict[str, Any] = {"workers": 2, "progress": False, "output": out, "manifest": os.path.join(out, "m.jsonl")}
    if os.environ.get("P9_STORAGE_OPTIONS"):  # the inputs are s3:// URLs of the latency store speaking S3
        kw["storage_options"] = json.loads(os.environ["P9_STORAGE_OPTIONS"])
    if os.environ.get("P9_OUTPUT"):  # the per-file indexes into the bucket too
        kw["output"] = os.environ["P9_OUTPUT"]
    if mode == "one-at-a-time":
        kw["in_flight"] = 1 if "in_flight" in run_batch.__code__.co_varnames else None
        if kw["in_flight"] is None:
            del kw["in_flight"]
    if mode == "combine":
        kw["combine"] = os.path.join(out, "combined.json")
    if mode == "parquet":
        kw["combine"] = os.path.join(out, "combined.parq")  # JSON per file, the combined index as parquet
    if mode == "icechunk":  # JSON per file, the combined dataset into an Icechunk repository
        kw.update(format="icechunk", combine=os.path.join(out, "repo"))
    cluster = None
    if mode == "dask":  # a cluster that runs already, as a user's does; its start-up reported beside
        from distributed import Client, LocalCluster

        t0 = time.perf_counter()
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
        kw.update(dask=Client(cluster))
        kw["dask"].wait_for_workers(2)
        started = time.perf_counter() - t0
    before = _counts(counts_url)
    report, sec = timed(lambda: run_batch("@" + inputs, **kw))
    after = _counts(counts_url)
    if cluster is not None:
        kw["dask"].close()
        cluster.close()
        return {"seconds": sec, "cluster_start": round(started, 2), "files": len(report.results),
                "failed": len(report.failed), "requests": after["requests"] - before["requests"],
                "workers_mb": _children_rss_mb(), "cpu": _cpu_seconds()}
    n = len(report.results)
    return {"seconds": sec, "files": n, "failed": len(report.failed), "indexed": len(report.indexed),
            "requests": after["requests"] - before["requests"],
            "heads": after.get("head_requests", 0) - before.get("head_requests", 0),
            "workers_mb": _children_rss_mb(), "combined": report.combined, "cpu": _cpu_seconds(),
            "combine": report.extra.get("combine")}


def _kerchunk_one(url: str) -> dict[str, Any]:
    import fsspec
    from kerchunk.hdf import SingleHdf5ToZarr

    fs = fsspec.filesystem("http")
    with fs.open(url, "rb", cache_type="first") as fh:
        return SingleHdf5ToZarr(fh, url, inline_threshold=256).translate()


def child_kerchunk(inputs: str, out: str, counts_url: str) -> dict[str, Any]:
    """kerchunk: SingleHdf5ToZarr in a Pool of 2, each index written, then MultiZarrToZarr."""
    from multiprocessing import get_context

    import ujson
    from kerchunk.combine import MultiZarrToZarr

    urls_ = [line.strip() for line in open(inputs) if line.strip()]
    before = _counts(counts_url)
    t0 = time.perf_counter()
    with get_context("spawn").Pool(2) as pool:
        refs = pool.map(_kerchunk_one, urls_, chunksize=8)
    for u, r in zip(urls_, refs):
        with open(os.path.join(out, u.rsplit("/", 1)[-1] + ".json"), "w") as fh:
            fh.write(ujson.dumps(r))
    per_file = time.perf_counter() - t0
    after = _counts(counts_url)
    combined = MultiZarrToZarr(refs, concat_dims=["time"], remote_protocol="http").translate()
    with open(os.path.join(out, "combined.json"), "w") as fh:
        fh.write(ujson.dumps(combined))
    return {"seconds": per_file, "with_combine": time.perf_counter() - t0, "files": len(urls_),
            "requests": after["requests"] - before["requests"], "workers_mb": _children_rss_mb(),
            "combined": os.path.join(out, "combined.json"), "cpu": _cpu_seconds()}


def _vz_one(args: tuple[str, str]) -> int:
    import warnings

    warnings.simplefilter("ignore")
    import virtualizarr
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import HTTPStore

    url, parser_name = args
    base = url.rsplit("/", 1)[0]
    registry = ObjectStoreRegistry({base: HTTPStore.from_url(base, client_options={"allow_http": True})})
    if parser_name == "refindex":
        import refindex.virtualizarr

        parser = refindex.virtualizarr.Parser()
    else:
        from virtualizarr.parsers import HDFParser

        parser = HDFParser()
    vds = virtualizarr.open_virtual_dataset(url, registry=registry, parser=parser, loadable_variables=[])
    return len(vds.variables)


def child_vz(inputs: str, out: str, counts_url: str, parser_name: str) -> dict[str, Any]:
    """VirtualiZarr: open_virtual_dataset of every file in a ProcessPoolExecutor of 2."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    urls_ = [line.strip() for line in open(inputs) if line.strip()]
    before = _counts(counts_url)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(2, mp_context=get_context("spawn")) as ex:
        done = list(ex.map(_vz_one, [(u, parser_name) for u in urls_], chunksize=8))
    sec = time.perf_counter() - t0
    after = _counts(counts_url)
    return {"seconds": sec, "files": len(done), "requests": after["requests"] - before["requests"],
            "workers_mb": _children_rss_mb(), "cpu": _cpu_seconds()}


def child_identical(combined: str, files_list: str, remote_protocol: str) -> dict[str, Any]:
    files = [line.strip() for line in open(files_list) if line.strip()]
    return {"seconds": 0.0, "identical": identical(combined, files, remote_protocol or None)}


class TreeRss:
    """Peak resident memory of this process and all its descendants together, sampled every ``every`` s
    (psutil): the whole batch (coordinator and workers), not one process's peak."""

    def __init__(self, every: float = 0.1):
        import threading

        import psutil

        self.me, self.every, self.peak, self.largest_child = psutil.Process(), every, 0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        import psutil

        while not self.stop.is_set():
            total = 0
            try:
                total = self.me.memory_info().rss
                for child in self.me.children(recursive=True):
                    try:
                        rss = child.memory_info().rss
                    except psutil.Error:
                        continue
                    total += rss
                    self.largest_child = max(self.largest_child, rss)
            except psutil.Error:
                pass
            self.peak = max(self.peak, total)
            self.stop.wait(self.every)

    def close(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        return {"tree_mb": round(self.peak / 2**20, 1), "largest_child_mb": round(self.largest_child / 2**20, 1)}


def child_curve(inputs: str, out: str) -> dict[str, Any]:
    """Index local files and combine them into parquet references: the whole batch's peak RSS (this process and
    its workers, sampled), the coordinator's own peak, and its largest worker's."""
    from refindex.batch import run_batch

    tree = TreeRss()
    report, sec = timed(lambda: run_batch("@" + inputs, workers=2, progress=False, output=out,
                                          manifest=os.path.join(out, "m.jsonl"),
                                          combine=os.path.join(out, "combined.parq")))
    return {"seconds": sec, "files": len(report.results), "failed": len(report.failed),
            "workers_mb": _children_rss_mb(), "combine": report.extra.get("combine"), **tree.close()}


CHILDREN = {"refindex": child_refindex, "kerchunk": child_kerchunk, "vz": child_vz, "identical": child_identical,
            "curve": child_curve}


# ---------------------------------------------------------------- parent side
def run_one(child: str, args: list[str], timeout: float, pythonpath: str | None = None,
            storage_options: dict[str, Any] | None = None, output: str | None = None) -> dict[str, Any]:
    """``child`` in a fresh process (with ``pythonpath`` first on the path: another refindex tree;
    ``storage_options``: the inputs' fsspec options, ``output``: where the per-file indexes go, for
    refindex's children)."""
    env = dict(os.environ, RUST_LOG="error")
    if storage_options is not None:
        env["P9_STORAGE_OPTIONS"] = json.dumps(storage_options)
    if output is not None:
        env["P9_OUTPUT"] = output
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    out = run_child(os.path.abspath(__file__), child, args, timeout, env=env)
    out.pop("process_seconds", None)  # (P9 times the work inside the child)
    return out


def tool_jobs(inputs: str, local_inputs: str, counts_url: str, baseline: str | None
              ) -> dict[str, tuple[str, list[str], str | None]]:
    jobs: dict[str, tuple[str, list[str], str | None]] = {
        "refindex batch (JSON)": ("refindex", [inputs, "{out}", counts_url, "json"], None),
        "refindex batch, a file at a time (--in-flight 1)": ("refindex", [inputs, "{out}", counts_url, "one-at-a-time"],
                                                             None),
        "refindex batch --combine (JSON)": ("refindex", [inputs, "{out}", counts_url, "combine"], None),
        "refindex batch --combine (parquet)": ("refindex", [inputs, "{out}", counts_url, "parquet"], None),
        "refindex batch on a running Dask LocalCluster (2)": ("refindex", [inputs, "{out}", counts_url, "dask"], None),
        "refindex batch, local disk": ("refindex", [local_inputs, "{out}", "", "json"], None),
        "kerchunk Pool(2) + MultiZarrToZarr": ("kerchunk", [inputs, "{out}", counts_url], None),
        "VirtualiZarr HDFParser, ProcessPool(2)": ("vz", [inputs, "{out}", counts_url, "HDFParser"], None),
        "VirtualiZarr + refindex parser, ProcessPool(2)": ("vz", [inputs, "{out}", counts_url, "refindex"], None),
    }
    if baseline:
        jobs["refindex batch, baseline tree"] = ("refindex", [inputs, "{out}", counts_url, "json"], baseline)
    return jobs


def measure(jobs: dict[str, tuple[str, list[str], str | None]], repeat: dict[str, int], timeout: float,
            files: list[str], remote: str) -> dict[str, dict[str, Any]]:
    """Every job ``repeat`` times in fresh processes, interleaved; medians; the last run's combined index checked."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in jobs}
    for round_ in range(max(repeat.values())):
        for name, (child, args, pythonpath) in jobs.items():
            if round_ >= repeat[name] or (runs[name] and runs[name][-1].get("status") != "ok"):
                continue
            out = tempfile.mkdtemp(prefix="p9-", dir=OUT)
            try:
                r = run_one(child, [a.replace("{out}", out) for a in args], timeout, pythonpath)
                if r.get("status") == "ok" and r.get("combined") and round_ == repeat[name] - 1:
                    check = run_one("identical", [r["combined"], files_list(files), remote], timeout)
                    r["identical"] = check.get("identical") or f"no: {check.get('error')}"
            finally:
                shutil.rmtree(out, ignore_errors=True)
            runs[name].append(r)
            print(f"  {name}: {fmt(r.get('seconds'))} s {r.get('status')} {r.get('error', '')}", file=sys.stderr,
                  flush=True)
    out_: dict[str, dict[str, Any]] = {}
    for name, rs in runs.items():
        bad = [r for r in rs if r.get("status") != "ok"]
        if bad:
            out_[name] = bad[0]
            continue
        merged = dict(rs[-1])
        for key in ("seconds", "requests", "with_combine", "cpu", "cluster_start"):
            if all(key in r for r in rs):
                merged[key] = median([r[key] for r in rs])
        merged["runs"] = [round(r["seconds"], 1) for r in rs]
        merged["peak_rss_mb"] = max(r.get("peak_rss_mb") or 0 for r in rs)
        merged["workers_mb"] = max(r.get("workers_mb") or 0 for r in rs)
        out_[name] = merged
    return out_


_LISTS: dict[int, str] = {}


def files_list(files: list[str]) -> str:
    key = hash(tuple(files))
    if key not in _LISTS:
        path = os.path.join(OUT, f"files-{abs(key)}.txt")
        with open(path, "w") as fh:
            fh.write("\n".join(files) + "\n")
        _LISTS[key] = path
    return _LISTS[key]


def goals(res: dict[str, dict[str, Any]], baseline: bool) -> list[str]:
    def sec(name: str) -> float | None:
        r = res.get(name) or {}
        return r.get("seconds") if r.get("status") == "ok" else None

    ours, dask = sec("refindex batch (JSON)"), sec("refindex batch on a running Dask LocalCluster (2)")
    before = sec("refindex batch, baseline tree" if baseline else "refindex batch, a file at a time (--in-flight 1)")
    rows = []
    for label, theirs, want in (("kerchunk", sec("kerchunk Pool(2) + MultiZarrToZarr"), 3.0),
                                ("VirtualiZarr HDFParser", sec("VirtualiZarr HDFParser, ProcessPool(2)"), 6.0),
                                ("refindex before" + (" (baseline tree)" if baseline else " (a file at a time)"),
                                 before, 2.0)):
        for runner, t in (("local workers", ours), ("Dask", dask)):
            ratio = theirs / t if theirs and t else None
            rows.append(f"- {runner}: {label} / refindex {f'{ratio:.2f}x' if ratio else '–'} (goal >= {want:g}x): "
                        + verdict(None if ratio is None else ratio >= want))
    return rows


def remote_section(n: int, repeat: int, slow_repeat: int, latency: float, bandwidth: float, timeout: float,
                   baseline: str | None, only: list[str] | None = None) -> str:
    from latency_store import LatencyStore

    folder, names = archive(n)
    local = [os.path.join(folder, x) for x in names]
    size = sum(os.path.getsize(p) for p in local) / n
    with LatencyStore(folder, latency, bandwidth) as store:
        inputs = files_list([store.url(x) for x in names])
        local_inputs = files_list(local)
        jobs = tool_jobs(inputs, local_inputs, store.counts_url, baseline)
        if only:
            jobs = {name: job for name, job in jobs.items() if any(w.lower() in name.lower() for w in only)}
        times = {name: (slow_repeat if "HDFParser" in name else repeat) for name in jobs}
        res = measure(jobs, times, timeout, local, "http")
    rows = []
    for name, r in res.items():
        ok = r.get("status") == "ok"
        sec = r.get("seconds") if ok else None
        rows.append([name, fmt(sec) if ok else r.get("status"), f"{n / sec * 3600:,.0f}" if sec else "–",
                     fmt(r["requests"] / n) if ok and "local" not in name else "–", fmt(r.get("peak_rss_mb")),
                     fmt(r.get("workers_mb")), fmt(r.get("cpu")), r.get("identical", "–"),
                     (" ".join(str(x) for x in r.get("runs", [])) or r.get("error", ""))
                     + (f" (cluster start-up {r['cluster_start']:.1f} s, not counted)"
                        if r.get("cluster_start") else "")])
    return "\n".join([
        f"### P9 archive: {n:,} daily CF files of {size / 1000:.0f} KB (4 chunks each) on the latency store "
        f"({latency * 1000:.0f} ms/request, {bandwidth / 1e6:.0f} MB/s per connection)", "",
        f"{repeat} fresh processes per tool ({slow_repeat} for HDFParser), interleaved, median; "
        "2 workers / pools of 2; "
        "identical: the last run's combined dataset against `xr.open_mfdataset(files, engine=\"h5netcdf\", "
        "combine=\"by_coords\")`; peak RSS: the measuring process (refindex's coordinator), workers: the largest "
        "child process; CPU s: user + system time of the process and its children (Dask's worker processes and "
        "the kerchunk combine's are not all counted).", "",
        table(["tool", "seconds", "files/hour", "requests/file", "peak RSS MB", "workers MB", "CPU s", "identical",
               "runs"],
              rows), "",
        "Goals of issue #43 item 4 (same run; ratios of medians):", "", *goals(res, baseline is not None), ""])


APPEND_KINDS = {"JSON": "combine", "parquet": "parquet", "Icechunk": "icechunk"}


def _first_run(kept: dict[tuple[str, str | None], list[str]], key: tuple[str, str | None], folders: list[str],
               args: list[str], timeout: float, tree: str | None, so: dict[str, Any] | None,
               output: str | None) -> dict[str, Any] | None:
    """``folders`` (the run's own; the bucket's folder of its indexes) as the run over the first files left
    them (None), or the failed run.  That run is made once per kind and tree and copied (``cp -a``: the
    files' times kept, so the manifest and the combine's state find their outputs as written) to the same
    folders before each append."""
    if key not in kept:
        setup = run_one("refindex", args, timeout, tree, so, output)
        if setup.get("status") != "ok":
            return setup
        kept[key] = []
        for folder in folders:
            shutil.rmtree(folder + "-first", ignore_errors=True)
            if os.path.exists(folder):
                shutil.move(folder, folder + "-first")
                kept[key].append(folder)
    for folder in kept[key]:
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["cp", "-a", folder + "-first", folder], check=True)
    return None


def append_section(n: int, extra: int, repeat: int, latency: float, bandwidth: float, timeout: float,
                   baseline: str | None = None, store_kind: str = "s3", indexes_in_bucket: bool = False) -> str:
    """Adding ``extra`` files to a combined archive of ``n`` against combining all ``n + extra`` anew.

    Per output kind and round, in fresh processes, interleaved: a full run over the ``n + extra`` files
    into an empty folder, and an append: the timed run over all of them in the folder a run over the
    first ``n`` left (manifest, per-file indexes, combined output and its state; that run is made once per
    kind and copied back before each round).
    ``baseline``: also the append of another refindex tree (the code before the combine's saved state).
    ``store_kind``: ``s3`` (the store speaks S3: inputs are ``s3://`` URLs read with s3fs, an unchanged
    input's freshness comes from the bucket's listing) or ``http`` (plain URLs: one HEAD per input).
    ``indexes_in_bucket``: the per-file indexes go into the bucket (``-o s3://…``; S3 only)."""
    from latency_store import LatencyStore

    folder, names = archive(n + extra)
    runs: dict[str, list[dict[str, Any]]] = {}
    with LatencyStore(folder, latency, bandwidth, bucket="archive" if store_kind == "s3" else None) as store:
        name_url = store.s3_url if store_kind == "s3" else store.url
        so = store.s3_options() if store_kind == "s3" else None
        every = files_list([name_url(x) for x in names])
        first = files_list([name_url(x) for x in names[:n]])
        kept: dict[tuple[str, str | None], list[str]] = {}  # (kind, tree) -> folders the first run left
        try:
            for _ in range(repeat):
                for label, mode in APPEND_KINDS.items():
                    for what in ("full", "append") + (("append, before",) if baseline else ()):
                        tree = baseline if what == "append, before" else None
                        tag = f"{mode}-{'before' if tree else 'now'}"
                        out = os.path.join(OUT, f"p9-append-{tag}")
                        bucket_dir = os.path.join(folder, f"p9-indexes-{tag}") if indexes_in_bucket else None
                        output = store.s3_url(os.path.basename(bucket_dir)) if bucket_dir else None
                        folders = [out] + ([bucket_dir] if bucket_dir else [])
                        for f in folders:
                            shutil.rmtree(f, ignore_errors=True)
                        try:
                            if what != "full":
                                setup = _first_run(kept, (mode, tree), folders, [first, out, store.counts_url, mode],
                                                   timeout, tree, so, output)
                                if setup is not None:
                                    runs.setdefault(f"{label} {what}", []).append(setup)
                                    continue
                                if bucket_dir:
                                    store.adopt(bucket_dir)  # the copies are the objects the first run PUT
                            r = run_one("refindex", [every, out, store.counts_url, mode], timeout, tree, so, output)
                        finally:
                            for f in folders:
                                shutil.rmtree(f, ignore_errors=True)
                        runs.setdefault(f"{label} {what}", []).append(r)
                        print(f"  {label} {what}: {fmt(r.get('seconds'))} s, {r.get('requests')} requests "
                              f"{r.get('status')} {r.get('error', '')} {r.get('combine')}", file=sys.stderr,
                              flush=True)
        finally:
            for folders_ in kept.values():
                for f in folders_:
                    shutil.rmtree(f + "-first", ignore_errors=True)
    rows, verdicts = [], []
    for label in APPEND_KINDS:
        med = {}
        for what in ("full", "append") + (("append, before",) if baseline else ()):
            rs = runs.get(f"{label} {what}", [])
            ok = [r for r in rs if r.get("status") == "ok"]
            if len(ok) != len(rs) or not ok:
                med[what] = None
                rows.append([label, what, "fail", "–", "–", "–", "–", (rs[0].get("error") if rs else "")[:80]])
                continue
            m = {k: median([r[k] for r in ok]) for k in ("seconds", "requests", "heads", "cpu")}
            med[what] = m
            comb = ok[-1].get("combine") or {}
            rows.append([label, what, fmt(m["seconds"]), fmt(m["requests"]), fmt(m["heads"]), fmt(m["cpu"]),
                         f"{comb.get('indexes_read')} / {comb.get('from_state')}",
                         " ".join(f"{r['seconds']:.1f}" for r in ok)])
        if med.get("full") and med.get("append"):
            t = med["append"]["seconds"] / med["full"]["seconds"]
            q = med["append"]["requests"] / med["full"]["requests"]
            q_scan = (med["append"]["requests"] - max(0, med["append"]["heads"] - extra)) / med["full"]["requests"]
            if med.get("append, before"):
                verdicts.append(f"- {label}, before (baseline tree): append / full run "
                                f"{med['append, before']['seconds'] / med['full']['seconds']:.0%} of the time")
            heads = (f" ({q_scan:.0%} without the HEAD per unchanged file that an HTTP store needs; an S3/GCS "
                     "listing gives those a request per 1,000)") if store_kind == "http" else ""
            verdicts.append(f"- {label}: append / full run {t:.0%} of the time (goal <= 15%): "
                            f"{verdict(t <= 0.15)}; {q:.0%} of the requests (goal <= 15%): {verdict(q <= 0.15)}"
                            + heads)
    return "\n".join([
        f"### P9 append: {extra:,} new files added to a combined archive of {n:,} (latency store "
        + ("speaking S3, read with s3fs" if store_kind == "s3" else "over plain HTTP")
        + (", the per-file indexes in the bucket too" if indexes_in_bucket else "")
        + f", {latency * 1000:.0f} ms/request, {bandwidth / 1e6:.0f} MB/s per connection)", "",
        f"{repeat} rounds, fresh processes, interleaved, median; full: all {n + extra:,} files into an empty folder; "
        f"append: the same command after a run over the first {n:,} (its manifest, per-file indexes, combined output "
        "and the combine's state kept); load average at the start: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", "",
        table(["output", "run", "seconds", "requests", "of them HEAD", "CPU s", "indexes read / from state", "runs"],
              rows), "", *verdicts, ""])


def curve_section(sizes: list[int], timeout: float) -> str:
    """The whole batch's peak memory (coordinator and workers) combining n local files into parquet, and the
    goals of issue #43 item 2: 10k <= 2x 1k, 100k <= 1 GB."""
    rows, peaks = [], {}
    for n in sizes:
        folder, names = curve_archive(n)
        inputs = files_list([os.path.join(folder, x) for x in names])
        out = tempfile.mkdtemp(prefix="p9-curve-", dir=OUT)
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        try:
            r = run_one("curve", [inputs, out], timeout)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        ok = r.get("status") == "ok" and not r.get("failed")
        if ok:
            peaks[n] = r["tree_mb"]
        rows.append([f"{n:,}", fmt(r.get("seconds")) if ok else r.get("status"), fmt(r.get("tree_mb")),
                     fmt(r.get("peak_rss_mb")), fmt(r.get("largest_child_mb")), load,
                     r.get("error", "") or (f"{r.get('failed')} failed" if r.get("failed") else "")])
        print(f"  curve {n}: {rows[-1]}", file=sys.stderr, flush=True)
    goals = []
    if 1000 in peaks and 10000 in peaks:
        goals.append(f"- 10,000 files: {peaks[10000] / peaks[1000]:.2f}x the 1,000-file peak (goal <= 2x): "
                     + verdict(peaks[10000] <= 2 * peaks[1000]))
    if 100000 in peaks:
        goals.append(f"- 100,000 files: {peaks[100000]:.0f} MB (goal <= 1 GB): " + verdict(peaks[100000] <= 1024))
    return "\n".join([
        "### P9 memory of `refindex batch --combine ….parq` over local files (one fresh process each, 2 workers)", "",
        "Files: P9's CF file (`tas` (1, 76, 180) float32 in 4 chunks of 13.7 KB, byte ranges in the index; one hourly "
        "step) copied with its time value rewritten (`curve_archive`); whole batch: the sum of the resident memory of the batch's process and all "
        "its descendants, sampled every 0.1 s (psutil), its peak.", "",
        table(["files", "seconds", "whole batch peak MB", "coordinator peak MB", "largest worker MB",
               "load average at start", "error"], rows), "", *goals, ""])


def main(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    if child_main(CHILDREN, argv):
        return ""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--slow-repeat", type=int, default=1, help="runs of VirtualiZarr's HDFParser (the slowest)")
    p.add_argument("--latency-ms", type=float, default=30.0)
    p.add_argument("--bandwidth-mbs", type=float, default=50.0)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--baseline", help="a refindex source tree to compare with (its parent folder holds refindex/)")
    p.add_argument("--only", default="", help="comma-separated words: only the tools whose name holds one")
    p.add_argument("--curve", default="", help="file counts for the combine's memory curve, e.g. 1000,10000")
    p.add_argument("--append", type=int, default=0, help="also time adding this many files to --files (append)")
    p.add_argument("--skip-tools", action="store_true", help="only the append and/or the curve")
    p.add_argument("--store", choices=("s3", "http"), default="s3",
                   help="the append's store: S3 (s3fs; freshness from the bucket listing) or plain HTTP (a HEAD each)")
    p.add_argument("--indexes-in-bucket", action="store_true",
                   help="the append's per-file indexes go into the bucket too (-o s3://...; --store s3)")
    a = p.parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    t0 = time.perf_counter()
    parts = [] if a.skip_tools else [
        remote_section(a.files, a.repeat, a.slow_repeat, a.latency_ms / 1000, a.bandwidth_mbs * 1e6, a.timeout,
                       a.baseline, [w for w in a.only.split(",") if w])]
    if a.append:
        parts.append(append_section(a.files, a.append, a.repeat, a.latency_ms / 1000, a.bandwidth_mbs * 1e6,
                                    a.timeout, a.baseline, a.store, a.indexes_in_bucket))
    if a.curve:
        parts.append(curve_section([int(x) for x in a.curve.split(",") if x], a.timeout * 4))
    text = "\n".join(parts)
    print(text)
    print(f"(P9 took {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return text


if __name__ == "__main__":
    main()
