"""P10: lazy reads after the open — a window of many chunks, and one point across an archive (issue 44).

Part A: one (rows, 32) int16 uncompressed file on the latency store, chunks written in order
(contiguous on disk), with two datasets: ``small`` (chunks of 256 rows, 16 KiB) and ``big``
(chunks of 2,496 rows, 156 KiB).  A window of 800 small chunks (12.8 MB) and one of 80 big
chunks (12.8 MB), each in the middle of its dataset, read by: zarr over ``refindex.open(index)``,
zarr over fsspec's ReferenceFileSystem (no refindex), the h5py road ``refindex.h5py_file(index)``,
h5py over an fsspec 8 MiB 'blockcache' file, local h5py, and refindex's Icechunk output through
icechunk + zarr.  Part B: 1,000 daily files (``tas(time, lat, lon)`` float32, chunks (1, 45, 90),
~16 KB each) in one combined index (built here from per-file indexes with the same units: the
read path is what is measured), ``ds.tas[:, 45, 90]`` (one chunk per file) through xarray.

Every figure is the read alone, after the open (imports and the open not timed), in a fresh
process; each reader runs ``--repeat`` times, interleaved, the median reported.  Requests and
bytes are the store's own counts of the read (``GET /_store/counts`` before and after).
Values are checked against a local h5py read (Part B: against xarray over h5netcdf per file).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import child_main, digest, run_child, run_repeated, table, verdict  # noqa: E402
from latency_store import LatencyStore, fetch_counts, http_storage_options  # noqa: E402

MiB = 1 << 20
OUT = Path(__file__).resolve().parent / "out" / "p10"
COLS = 32
WINDOWS = {  # dataset -> (rows per chunk, chunks in the dataset, first chunk of the window, chunks read)
    "small": (256, 4000, 800, 800),  # 64 MB after the window: room for a read-ahead to overshoot
    "big": (2496, 400, 80, 80),
}
ARCHIVE_HOST = "http://archive.invalid/"  # replaced by the store's URL in each run
NLAT, NLON, ACHUNK = 90, 180, (1, 45, 90)
POINT = (45, 90)


# ------------------------------------------------------------------ data (parent side)
def window_file() -> Path:
    import h5py
    import numpy as np

    path = OUT / "window.h5"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with h5py.File(tmp, "w") as f:
        for name, (rows, n, _, _) in WINDOWS.items():
            d = f.create_dataset(name, (rows * n, COLS), "i2", chunks=(rows, COLS))
            for i in range(n):  # chunk by chunk: allocated in order, contiguous on disk
                d[i * rows:(i + 1) * rows] = np.arange(i * rows * COLS, (i + 1) * rows * COLS).reshape(rows, COLS) % 32749
    os.replace(tmp, path)
    return path


def window_of(name: str) -> tuple[int, int]:
    rows, _, first, count = WINDOWS[name]
    return first * rows, (first + count) * rows


def archive(files: int) -> Path:
    """``files`` daily netCDF4 files and a combined index template (URLs under ARCHIVE_HOST)."""
    folder = OUT / f"archive{files}"
    combined = folder / "combined.template.json"
    if combined.exists():
        return combined
    import h5netcdf
    import numpy as np

    import refindex

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    per_file = []
    for i in range(files):
        path = folder / f"tas_{i:04d}.nc"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            with h5netcdf.File(tmp, "w") as f:
                f.dimensions = {"time": None, "lat": NLAT, "lon": NLON}
                t = f.create_variable("time", ("time",), "i4")
                t.attrs["units"] = "days since 2000-01-01"
                t.attrs["calendar"] = "standard"
                f.resize_dimension("time", 1)
                t[:] = [i]
                la = f.create_variable("lat", ("lat",), "f4", data=np.linspace(-89, 89, NLAT, dtype="f4"))
                la.attrs["units"] = "degrees_north"
                lo = f.create_variable("lon", ("lon",), "f4", data=np.linspace(0, 358, NLON, dtype="f4"))
                lo.attrs["units"] = "degrees_east"
                v = f.create_variable("tas", ("time", "lat", "lon"), "f4", chunks=ACHUNK)
                v.attrs["units"] = "K"
                v[:] = (250 + 40 * rng.random((1, NLAT, NLON))).astype("f4")
            os.replace(tmp, path)
        per_file.append(refindex.scan(str(path), url=ARCHIVE_HOST + path.name, progress=False))
    doc = combine_same_units(per_file, files)
    tmp = combined.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, combined)
    return combined


def combine_same_units(indexes: list[dict[str, Any]], files: int) -> dict[str, Any]:
    """One index of ``files`` one-step files along ``time`` (same units in every file: time values as they are)."""
    first = indexes[0]["refs"]
    refs: dict[str, Any] = {}
    for key, value in first.items():
        if key == ".zmetadata" or key.startswith(("tas/", "time/")) and not key.endswith((".zarray", ".zattrs")):
            continue
        refs[key] = value
    for var in ("tas", "time"):
        meta = json.loads(first[f"{var}/.zarray"])
        meta["shape"][0] = files
        refs[f"{var}/.zarray"] = json.dumps(meta)
    for i, idx in enumerate(indexes):
        for key, value in idx["refs"].items():
            if isinstance(value, list) and value and "{{" in value[0]:
                value = [value[0].replace("{{u}}", idx["templates"]["u"]), *value[1:]]
            if key.startswith("tas/") and key[4:5].isdigit():
                _, rest = key[4:].split(".", 1)
                refs[f"tas/{i}.{rest}"] = value
            elif key.startswith("time/") and key[5:6].isdigit():
                refs[f"time/{i}"] = value
    meta = {k: json.loads(v) for k, v in refs.items() if k.rsplit("/", 1)[-1] in (".zgroup", ".zarray", ".zattrs")}
    refs[".zmetadata"] = json.dumps({"zarr_consolidated_format": 1, "metadata": meta})
    return {"version": 1, "refs": refs}


# ------------------------------------------------------------------ measurements (child side)
def _measure(read, counts_url: str) -> dict[str, Any]:
    before = fetch_counts(counts_url)
    t0 = time.perf_counter()
    a = read()
    sec = time.perf_counter() - t0
    after = fetch_counts(counts_url)
    return {"seconds": sec, "digest": digest(a), "requests": after["requests"] - before["requests"],
            "bytes": after["bytes"] - before["bytes"]}


def _warm_zarr() -> None:
    import aiohttp  # noqa: F401
    import fsspec.implementations.http  # noqa: F401
    import numpy as np
    import zarr

    zarr.array(np.zeros(4))[...]


def child_window(reader: str, target: str, name: str, counts_url: str) -> dict[str, Any]:
    """One window read by ``reader`` from ``target`` (an index, a URL, a path or an Icechunk repository)."""
    a, b = window_of(name)
    if reader == "refindex_zarr":
        import refindex

        _warm_zarr()
        arr = refindex.open(target, check_source=False)[name]
        return _measure(lambda: arr[a:b], counts_url)
    if reader in ("fsspec_zarr", "fsspec_zarr_tuned"):
        import fsspec
        import zarr

        _warm_zarr()
        if reader == "fsspec_zarr_tuned":  # what docs/reading-elsewhere.md tells a reader without refindex
            zarr.config.set({"async.concurrency": 1024})
        fs = fsspec.filesystem("reference", fo=target, remote_protocol="http",
                               remote_options={**http_storage_options(), "asynchronous": True}, asynchronous=True)
        arr = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=2)[name]
        return _measure(lambda: arr[a:b], counts_url)
    if reader == "road":
        import refindex

        f = refindex.h5py_file(target, check_source=False)
        d = f[name]
        out = _measure(lambda: d[a:b], counts_url)
        f.close()
        return out
    if reader == "blockcache":
        import fsspec
        import h5py

        fs = fsspec.filesystem("http", **http_storage_options())
        with fs.open(target, "rb", cache_type="blockcache", block_size=8 * MiB) as fh, h5py.File(fh, "r") as f:
            d = f[name]
            return _measure(lambda: d[a:b], counts_url)
    if reader == "floor":
        return _floor(target, name, counts_url)
    if reader == "local":
        import h5py

        with h5py.File(target, "r") as f:
            d = f[name]
            t0 = time.perf_counter()
            v = d[a:b]
            return {"seconds": time.perf_counter() - t0, "digest": digest(v), "requests": 0, "bytes": 0}
    if reader == "icechunk":
        import warnings

        warnings.simplefilter("ignore")
        import icechunk as ic
        import zarr

        from refindex.codecs import register_v3_codecs
        from refindex.formats.icechunk import credentials_for, declared_containers

        _warm_zarr()
        register_v3_codecs()
        ic.set_logs_filter("error")
        storage = ic.local_filesystem_storage(target)
        prefixes = declared_containers(ic.Repository.fetch_config(storage))
        repo = ic.Repository.open(storage, authorize_virtual_chunk_access=credentials_for(prefixes, None))
        arr = zarr.open_group(repo.readonly_session(branch="main").store, mode="r", zarr_format=3)[name]
        return _measure(lambda: arr[a:b], counts_url)
    raise ValueError(reader)


async def _gets(urls: list[str], spans: list[tuple[int, int]], limit: int, counts_url: str) -> dict[str, Any]:
    """Ranged GETs through one aiohttp session, ``limit`` connections opened (and counted out) first."""
    import asyncio

    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit)) as s:
        async def one(url: str, a: int, b: int) -> bytes:
            async with s.get(url, headers={"Range": f"bytes={a}-{b - 1}"}) as r:
                return await r.read()

        n = min(limit, len(urls))
        await asyncio.gather(*(one(urls[0], 0, 1) for _ in range(n)))  # connections made before the clock
        before = fetch_counts(counts_url)
        t0 = time.perf_counter()
        datas = await asyncio.gather(*(one(u, a, b) for u, (a, b) in zip(urls, spans)))
        sec = time.perf_counter() - t0
        after = fetch_counts(counts_url)
    return {"seconds": sec, "datas": datas, "requests": after["requests"] - before["requests"],
            "bytes": after["bytes"] - before["bytes"]}


def _floor(index: str, name: str, counts_url: str) -> dict[str, Any]:
    """The window's bytes as aiohttp alone fetches them at best: its span (the chunks lie one after
    another) in 16 ranged GETs side by side, no zarr, no decoding: what the store and this machine allow."""
    import asyncio

    import numpy as np

    refs = json.load(open(index))
    rows, _, first, count = WINDOWS[name]
    url = refs["templates"]["u"]
    chunks = [refs["refs"][f"{name}/{i}.0"] for i in range(first, first + count)]
    a, b = chunks[0][1], chunks[-1][1] + chunks[-1][2]
    step = -(-(b - a) // 16)
    parts = [(x, min(b, x + step)) for x in range(a, b, step)]
    r = asyncio.run(_gets([url] * len(parts), parts, 16, counts_url))
    span = b"".join(r.pop("datas"))
    out = [np.frombuffer(span, "<i2", c[2] // 2, c[1] - a) for c in chunks]
    return {**r, "digest": digest(np.concatenate(out).reshape(-1, COLS))}


def _series_floor(index: str, counts_url: str) -> dict[str, Any]:
    """The series' chunks as aiohttp alone fetches them: 1,000 ranged GETs, 256 in flight; no zarr, no xarray."""
    import asyncio

    import numpy as np

    refs = json.load(open(index))["refs"]
    files = json.loads(refs["tas/.zarray"])["shape"][0]
    i, j = POINT[0] // ACHUNK[1], POINT[1] // ACHUNK[2]
    wanted = [refs[f"tas/{t}.{i}.{j}"] for t in range(files)]
    r = asyncio.run(_gets([w[0] for w in wanted], [(w[1], w[1] + w[2]) for w in wanted], 256, counts_url))
    at = (POINT[0] % ACHUNK[1]) * ACHUNK[2] + POINT[1] % ACHUNK[2]
    values = np.asarray([np.frombuffer(d, "<f4")[at] for d in r.pop("datas")], "f4")
    return {**r, "digest": digest(values)}


def child_series(reader: str, index: str, counts_url: str) -> dict[str, Any]:
    """``ds.tas[:, 45, 90]`` over the combined index, opened as ``reader`` says."""
    import warnings

    warnings.simplefilter("ignore")
    import xarray as xr

    import refindex

    _warm_zarr()
    import dask.array  # noqa: F401

    if reader == "floor":
        return _series_floor(index, counts_url)
    if reader == "docs_before":  # docs/batch.md before issue 44
        ds = xr.open_zarr(refindex.open(index, check_source=False).store, consolidated=False)
    elif reader == "open_zarr_nodask":
        ds = xr.open_zarr(refindex.open(index, check_source=False).store, consolidated=False, chunks=None)
    elif reader == "engine":
        ds = xr.open_dataset(index, engine="refindex", check_source=False)
    elif reader == "engine_dask":
        ds = xr.open_dataset(index, engine="refindex", chunks={}, check_source=False)
    else:
        raise ValueError(reader)
    return _measure(lambda: ds.tas[:, POINT[0], POINT[1]].values, counts_url)


CHILDREN = {"window": child_window, "series": child_series}


# ------------------------------------------------------------------ driver (parent side)
WINDOW_READERS = {
    "refindex_zarr": "zarr over `refindex.open(index)`",
    "fsspec_zarr": "zarr over fsspec's reference FS (no refindex)",
    "fsspec_zarr_tuned": "the same, zarr `async.concurrency` 1024 (docs/reading-elsewhere.md)",
    "road": "h5py road `h5py_file(index)`",
    "blockcache": "h5py + fsspec 8 MiB blockcache",
    "icechunk": "refindex's Icechunk output, icechunk + zarr",
    "local": "local h5py",
    "floor": "floor: aiohttp alone, the span in 16 ranged GETs side by side, connections open (no zarr)",
}
SERIES_READERS = {
    "docs_before": "`xr.open_zarr(refindex.open(index).store)` (docs before; dask)",
    "open_zarr_nodask": "`xr.open_zarr(..., chunks=None)` (no dask)",
    "engine": "`xr.open_dataset(index, engine=\"refindex\")`",
    "engine_dask": "`xr.open_dataset(index, engine=\"refindex\", chunks={})` (dask)",
    "floor": "floor: aiohttp alone, 1,000 ranged GETs, 256 connections open (no zarr, no xarray)",
}


def _truths(path: Path) -> dict[str, str]:
    import h5py

    with h5py.File(path, "r") as f:
        return {name: digest(f[name][slice(*window_of(name))]) for name in WINDOWS}


def _series_truth(folder: Path, files: int) -> str:
    import h5py
    import numpy as np

    vals = []
    for i in range(files):
        with h5py.File(folder / f"tas_{i:04d}.nc", "r") as f:
            vals.append(f["tas"][0, POINT[0], POINT[1]])
    return digest(np.asarray(vals, "f4"))


def _row(label: str, r: dict[str, Any], needed: int | None) -> list[Any]:
    ok = r.get("status") == "ok"
    ratio = (r["bytes"] / needed) if ok and needed else None
    runs = " ".join(f"{x:.3f}" for x in r.get("runs", []))
    return [label, r.get("status"), r.get("seconds") if ok else None, r.get("requests") if ok else None,
            round(r["bytes"] / 1e6, 2) if ok else None, round(ratio, 2) if ratio else None,
            (r.get("error", "") or runs).splitlines()[0][:160] if (r.get("error") or runs) else ""]


BEFORE_READERS = {"refindex_zarr", "road", "docs_before", "open_zarr_nodask"}  # also run on --before's code
BEFORE = "@before"


def run(files: int, latency: float, bandwidth: float, timeout: float, repeat: int, readers: list[str] | None,
        before: str | None = None) -> str:
    import refindex

    path = window_file()
    truths = _truths(path)
    combined = archive(files) if files else None
    series_truth = _series_truth(combined.parent, files) if combined else None
    me = os.path.abspath(__file__)
    with LatencyStore(OUT, latency, bandwidth) as store:
        url = store.url(path.name)
        index = OUT / "window.refs.json"
        index.write_text(json.dumps(refindex.scan(str(path), url=url, progress=False)))
        repo = OUT / "window.icechunk"
        import shutil

        shutil.rmtree(repo, ignore_errors=True)
        try:
            refindex.scan_to_icechunk(str(path), str(repo), url=url, progress=False)
        except Exception as e:  # noqa: BLE001 - reported as the row's failure
            print(f"icechunk output failed: {e}", file=sys.stderr)
        targets = {"refindex_zarr": str(index), "fsspec_zarr": str(index), "fsspec_zarr_tuned": str(index),
                   "road": str(index), "blockcache": url, "local": str(path), "icechunk": str(repo),
                   "floor": str(index)}
        jobs = {}
        for name in WINDOWS:
            for reader in WINDOW_READERS:
                if readers and reader not in readers:
                    continue
                jobs[(name, reader)] = (me, "window", [reader, targets[reader], name, store.counts_url])
                if before and reader in BEFORE_READERS:
                    jobs[(name, reader + BEFORE)] = (os.path.join(before, "benchmarks", "p10_reads.py"), "window",
                                                     [reader, targets[reader], name, store.counts_url])
        series_index = None
        if combined is not None:
            series_index = combined.parent / "combined.refs.json"
            series_index.write_text(combined.read_text().replace(ARCHIVE_HOST, store.url(combined.parent.name) + "/"))
            for reader in SERIES_READERS:
                if readers and reader not in readers:
                    continue
                jobs[("series", reader)] = (me, "series", [reader, str(series_index), store.counts_url])
                if before and reader in BEFORE_READERS:
                    jobs[("series", reader + BEFORE)] = (os.path.join(before, "benchmarks", "p10_reads.py"), "series",
                                                         [reader, str(series_index), store.counts_url])

        def measure(key: Any, script: str, child: str, args: list[str]) -> dict[str, Any]:
            old = os.environ.get("PYTHONPATH")
            if key[1].endswith(BEFORE):  # that checkout's refindex, imported first
                os.environ["PYTHONPATH"] = before
            try:
                r = run_child(script, child, args, timeout)
            finally:
                if key[1].endswith(BEFORE):
                    os.environ.pop("PYTHONPATH", None) if old is None else os.environ.__setitem__("PYTHONPATH", old)
            truth = series_truth if key[0] == "series" else truths[key[0]]
            if r.get("status") == "ok" and r.get("digest") != truth:
                r["status"], r["error"] = "WRONG", "values differ from a local h5py read"
            return r

        res = run_repeated(jobs, repeat, timeout, measure, medians=("requests", "bytes"))
    return report(res, files, repeat, latency, bandwidth, before)


def _labels(table: dict[str, str], before: str | None) -> dict[str, str]:
    out = {}
    for k, label in table.items():
        out[k] = label
        if before and k in BEFORE_READERS:
            out[k + BEFORE] = f"{label}, the code before (`{os.path.basename(before.rstrip('/'))}`)"
    return out


def report(res: dict[Any, dict[str, Any]], files: int, repeat: int, latency: float, bandwidth: float,
           before: str | None = None) -> str:
    head = ["reader", "status", "read s", "requests", "MB fetched", "x needed", "runs"]
    txt = [f"### P10 reads after the open (issue 44): loopback store, {latency * 1000:.0f} ms/request, "
           f"{bandwidth / 1e6:.0f} MB/s per connection", "",
           f"Each reader ran {repeat} times in fresh processes, interleaved; median read time (every run in the "
           "last column); requests and bytes as the store counted them during the read.", ""]
    for name, (rows, _, first, count) in WINDOWS.items():
        needed = rows * COLS * 2 * count
        txt += [f"**{count} chunks of {rows * COLS * 2 // 1024} KiB** (`{name}[{first * rows}:{(first + count) * rows}]`, "
                f"{needed / 1e6:.1f} MB)", "",
                table(head, [_row(label, res[(name, k)], needed) for k, label in _labels(WINDOW_READERS, before).items()
                             if (name, k) in res]), ""]
    series_labels = _labels(SERIES_READERS, before)
    series = {k: res[("series", k)] for k in series_labels if ("series", k) in res}
    if series:
        txt += [f"**{files} daily files in one index**, `ds.tas[:, {POINT[0]}, {POINT[1]}]` (one chunk per file)", "",
                table(head, [_row(series_labels[k], r, None) for k, r in series.items()]), ""]
    txt += goals(res)
    return "\n".join(txt + [""])


def goals(res: dict[Any, dict[str, Any]]) -> list[str]:
    def sec(key: Any) -> float | None:
        r = res.get(key)
        return r["seconds"] if r and r.get("status") == "ok" else None

    def ratio(key: Any, name: str) -> float | None:
        r = res.get(key)
        rows, _, _, count = WINDOWS[name]
        return r["bytes"] / (rows * COLS * 2 * count) if r and r.get("status") == "ok" else None

    out = ["Goals (issue 44):", ""]
    s, b = sec(("small", "refindex_zarr")), sec(("big", "refindex_zarr"))
    rs = ratio(("small", "refindex_zarr"), "small")
    # "the h5py road today": the code before, where this run has it
    road_s, road_b = (sec(("small", "road" + BEFORE)) or sec(("small", "road")),
                      sec(("big", "road" + BEFORE)) or sec(("big", "road")))
    out.append(f"- 800 x 16 KiB through `refindex.open` + zarr <= 0.15 s and <= 1.2x the bytes: "
               f"{s if s is None else round(s, 3)} s, {rs if rs is None else round(rs, 2)}x: "
               f"{verdict(None if s is None else s <= 0.15 and rs <= 1.2)}")
    out.append(f"- 80 x 156 KiB through `refindex.open` + zarr <= 0.10 s: {b if b is None else round(b, 3)} s: "
               f"{verdict(None if b is None else b <= 0.10)}")
    out.append(f"- both faster than the h5py road before issue 44 (same run: {road_s if road_s is None else round(road_s, 3)} s, "
               f"{road_b if road_b is None else round(road_b, 3)} s): "
               f"{verdict(None if None in (s, b, road_s, road_b) else s < road_s and b < road_b)}")
    rr, road_now = ratio(("small", "road"), "small"), sec(("small", "road"))
    out.append(f"- h5py road window <= 0.15 s and <= 1.5x the bytes: {road_now if road_now is None else round(road_now, 3)} s, "
               f"{rr if rr is None else round(rr, 2)}x: "
               f"{verdict(None if road_now is None else road_now <= 0.15 and rr <= 1.5)}")
    e = sec(("series", "engine"))
    out.append(f"- the 1,000-file series through the documented road (`engine=\"refindex\"`) <= 0.5 s: "
               f"{e if e is None else round(e, 3)} s: {verdict(None if e is None else e <= 0.5)}")
    return out + [""]


def main(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    if child_main(CHILDREN, argv):
        return ""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", type=int, default=1000, help="daily files of Part B (0: skip it)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--latency-ms", type=float, default=30.0)
    p.add_argument("--bandwidth-mbs", type=float, default=50.0)
    p.add_argument("--timeout", type=float, default=180)
    p.add_argument("--readers", nargs="*", help="only these readers (keys of WINDOW_READERS/SERIES_READERS)")
    p.add_argument("--before", help="a checkout of refindex (with this script in its benchmarks/) whose code also "
                                    "runs the refindex readers, interleaved with this one's: before/after in one run")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    text = run(a.files, a.latency_ms / 1000, a.bandwidth_mbs * 1e6, a.timeout, a.repeat, a.readers,
               os.path.abspath(a.before) if a.before else None)
    print(text)
    print(f"(P10 took {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return text


if __name__ == "__main__":
    main()
