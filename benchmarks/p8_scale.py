"""P8: chunk indexes at archive scale (issue #24) — big remote files, and 10^6 chunks locally.

Three inputs:

- **big**: 500,000 incompressible 8 KiB chunks in one 1-D dataset (4.1 GB), written in slabs as a
  recording grows, so the version 1 B-tree's ~7,900 nodes (~2 KB each, 4 levels) lie between the
  data, ~0.5 MB apart.  Built by this script into benchmarks/out/ and deleted afterwards
  (``--keep`` keeps it).
- **many**: 1,000,000 gzip chunks of a 4000 x 1000 float32 dataset (68 MB; the P1 builder).
- the same file read locally.

Remote figures come from the loopback latency store (30 ms per request, 50 MB/s per connection),
each tool in its own process: wall time, requests and bytes the store served, peak RSS and the
number of sequential rounds (refindex: its waits, each a batch of concurrent requests; libhdf5
and the tools built on it read one request after another, so their rounds are their requests).
refindex and kerchunk write reference indexes without inline chunks (``inline_threshold=0``), as
the other tools only list chunk locations.  kerchunk reads through the same 8 MiB fsspec block
cache as h5py.  The local section times whole processes (``refindex scan`` with JSON written vs
a bare ``chunk_iter`` process) and the in-process figures of P1, and the writers alone.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import child_main, median, path_size, run_child, run_repeated, table, timed, verdict  # noqa: E402
from latency_store import LatencyStore, http_storage_options  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
MiB = 1 << 20
BIG_CHUNK = 8192
BIG_CHUNKS = 500_000


# ------------------------------------------------------------------ inputs
def build_big(path: str, chunks: int = BIG_CHUNKS) -> str:
    """``chunks`` random 8 KiB chunks of one uint8 dataset, appended in 16 MiB slabs (default B-tree)."""
    import h5py
    import numpy as np

    if os.path.exists(path):
        return path
    tmp = path + ".tmp"
    rng = np.random.default_rng(8)
    slab = 2048 * BIG_CHUNK
    n = chunks * BIG_CHUNK
    with h5py.File(tmp, "w") as f:
        d = f.create_dataset("data", shape=(n,), maxshape=(None,), chunks=(BIG_CHUNK,), dtype="u1")
        for lo in range(0, n, slab):
            hi = min(n, lo + slab)
            d[lo:hi] = np.frombuffer(rng.bytes(hi - lo), "u1")
    os.replace(tmp, path)
    return path


# ------------------------------------------------------------------ measurements (child side)
def child_refindex(src: str, native: str = "1") -> dict[str, Any]:
    """``refindex scan``'s work: the index written (JSON, streamed from the chunk tables) to a local file."""
    from refindex.api import scan_to_file  # imported before the clock starts (refindex loads lazily)
    import h5py, numcodecs, zarr  # noqa: E401,F401 - what a scan loads lazily

    stats: dict[str, Any] = {}
    kw: dict[str, Any] = {"storage_options": http_storage_options()} if src.startswith("http") else {}
    out = os.path.join(OUT, f"p8_child_{os.getpid()}.json")
    try:
        summary, sec = timed(lambda: scan_to_file(src, out, stats=stats, inline_threshold=0,
                                                  native_index=native == "1", **kw))
    finally:
        if os.path.exists(out):
            os.unlink(out)
    return {"seconds": sec, "chunks": summary["chunks_referenced"], "own_stats": stats}


def child_h5py(url: str) -> dict[str, Any]:
    import fsspec
    import h5py

    so = http_storage_options()

    def go() -> int:
        fs = fsspec.filesystem("http", **so)
        n = [0]
        with fs.open(url, "rb", cache_type="blockcache", block_size=8 * MiB) as fh, h5py.File(fh, "r") as f:
            f["data"].id.chunk_iter(lambda _i: n.__setitem__(0, n[0] + 1))
        return n[0]

    n, sec = timed(go)
    return {"seconds": sec, "chunks": n}


def child_kerchunk(url: str) -> dict[str, Any]:
    import fsspec
    from kerchunk.hdf import SingleHdf5ToZarr

    so = http_storage_options()

    def go() -> dict[str, Any]:
        fs = fsspec.filesystem("http", **so)
        with fs.open(url, "rb", cache_type="blockcache", block_size=8 * MiB) as fh:
            return SingleHdf5ToZarr(fh, url, inline_threshold=0).translate()

    refs, sec = timed(go)
    return {"seconds": sec, "chunks": sum(1 for v in refs["refs"].values() if isinstance(v, list))}


def child_hdfparser(url: str) -> dict[str, Any]:
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import HTTPStore
    from virtualizarr.parsers import HDFParser

    base = url.rsplit("/", 1)[0]

    def go() -> int:
        store = HTTPStore.from_url(base, client_options={"allow_http": True})
        manifest = HDFParser()(url, ObjectStoreRegistry({base: store}))
        return len(manifest._group.arrays["data"].manifest)  # the one dataset's chunk manifest

    n, sec = timed(go)
    return {"seconds": sec, "chunks": n}


def child_asynchdf5(url: str) -> dict[str, Any]:
    import asyncio

    from async_hdf5 import HDF5File
    from obstore.store import HTTPStore

    base, name = url.rsplit("/", 1)

    async def go() -> int:
        f = await HDF5File.open(name, store=HTTPStore.from_url(base, client_options={"allow_http": True}))
        root = await f.root_group()
        d = await root.dataset("data")
        return len(await d.chunk_index())

    n, sec = timed(lambda: asyncio.run(go()))
    return {"seconds": sec, "chunks": n}


def child_floor(src: str) -> dict[str, Any]:
    import h5py

    with h5py.File(src, "r") as f:
        n = [0]
        _, sec = timed(lambda: f["data"].id.chunk_iter(lambda _i: n.__setitem__(0, n[0] + 1)))
    return {"seconds": sec, "chunks": n[0]}


def child_local(src: str, out: str, native: str = "1") -> dict[str, Any]:
    from refindex.api import scan_to_file
    import h5py, numcodecs, zarr  # noqa: E401,F401

    _, sec = timed(lambda: scan_to_file(src, out, inline_threshold=0, native_index=native == "1"))
    return {"seconds": sec, "bytes": path_size(out)}


def child_kerchunk_local(src: str, out: str) -> dict[str, Any]:
    from kerchunk.hdf import SingleHdf5ToZarr

    def go() -> None:
        refs = SingleHdf5ToZarr(src, src, inline_threshold=0).translate()
        with open(out, "w") as fh:
            json.dump(refs, fh)

    _, sec = timed(go)
    return {"seconds": sec, "bytes": path_size(out)}


def child_writers(src: str, out: str) -> dict[str, Any]:
    """The writers alone: one scan, then the JSON and the parquet index of its 10^6 chunks."""
    from refindex import formats
    from refindex.options import ScanOptions
    from refindex.pipeline import scan_tree

    tree = scan_tree(src, ScanOptions(inline_threshold=0))
    res: dict[str, Any] = {"seconds": 0.0}
    for name, write, path in (("json", formats.write_json_stream, out + ".json"),
                              ("parquet", formats.write_parquet, out + ".parq")):
        _, res[name] = timed(lambda: write(tree, path))
        res[name + "_bytes"] = path_size(path)
    return res


CHILDREN = {"refindex": child_refindex, "h5py": child_h5py, "kerchunk": child_kerchunk, "hdfparser": child_hdfparser,
            "asynchdf5": child_asynchdf5, "floor": child_floor, "local": child_local,
            "kerchunk_local": child_kerchunk_local, "writers": child_writers}


# ------------------------------------------------------------------ driver (parent side)
REMOTE_TOOLS = [  # (label, child, extra args, runs)
    ("refindex", "refindex", ["1"], 3),
    ("refindex, libhdf5's chunk_iter (before #24)", "refindex", ["0"], 1),
    ("h5py + fsspec 8 MiB blockcache, chunk_iter", "h5py", [], 1),
    ("kerchunk (8 MiB blockcache)", "kerchunk", [], 1),
    ("VirtualiZarr HDFParser (obstore)", "hdfparser", [], 1),
    ("async-hdf5 (obstore)", "asynchdf5", [], 1),
]


def remote(path: str, latency: float, bandwidth: float, timeout: float, skip: set[str]) -> dict[str, dict[str, Any]]:
    """Every tool over the latency store, interleaved; refindex (fast) several times, the others once."""
    me = os.path.abspath(__file__)
    with LatencyStore(os.path.dirname(path), latency, bandwidth) as store:
        url = store.url(os.path.basename(path))

        def measure(label: str, script: str, child: str, args: list[str]) -> dict[str, Any]:
            store.reset()
            load, before, store_before = os.getloadavg()[0], resource.getrusage(resource.RUSAGE_CHILDREN), \
                time.process_time()
            r = run_child(script, child, args, timeout)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            r.update(store.counts())
            # CPU: the reader's whole process (imports too), and this process's (the store's thread: it only waits
            # otherwise); the load average before the run (the machine is shared: wall times move with it)
            r.update(process_cpu=round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
                     store_cpu=round(time.process_time() - store_before, 2), load=round(load, 1))
            return r

        tools = [t for t in REMOTE_TOOLS if t[0] not in skip]
        jobs = {label: (me, child, [url, *extra]) for label, child, extra, _ in tools}
        return run_repeated(jobs, {label: runs for label, _, _, runs in tools}, timeout, measure,
                            medians=("process_cpu", "store_cpu", "load"))


def _rounds(r: dict[str, Any]) -> Any:
    st = r.get("own_stats")
    if st and "round_trips" in st:
        return st["round_trips"]
    return r.get("requests")  # one request after another


def remote_table(res: dict[str, dict[str, Any]], skipped: dict[str, str]) -> str:
    rows = []
    for label, r in res.items():
        ok = r.get("status") == "ok"
        note = r.get("error", "") if not ok else (f"median of {len(r['runs'])}" if len(r.get("runs", [])) > 1 else "")
        rows.append([label, r.get("status"), r.get("seconds") if ok else None, r.get("process_cpu"), r.get("store_cpu"),
                     r.get("load"), r.get("requests"), round(r.get("bytes", 0) / 1e6, 1), _rounds(r) if ok else None,
                     r.get("peak_rss_mb"), r.get("chunks") if ok else None, note])
    for label, why in skipped.items():
        rows.append([label, "not run", None, None, None, None, None, None, None, None, None, why])
    return table(["tool", "status", "wall s", "process CPU s", "store CPU s", "load", "requests", "MB fetched",
                  "sequential rounds", "peak RSS MB", "chunks", "note"], rows)


def big_section(args: argparse.Namespace) -> str:
    path = os.path.join(OUT, f"p8_big_{args.big_chunks}.h5")
    t0 = time.perf_counter()
    build_big(path, args.big_chunks)
    built = time.perf_counter() - t0
    size = os.path.getsize(path)
    skipped = {"refindex, libhdf5's chunk_iter (before #24)":
               "~325 s, 8,776 requests measured for the issue; not repeated here"}
    for label, child, _, _ in REMOTE_TOOLS:
        if child in args.big_skip:
            skipped[label] = "not run this time (--big-skip)"
    try:
        res = remote(path, args.latency_ms / 1000, args.bandwidth_mbs * 1e6, args.timeout, set(skipped))
    finally:
        if not args.keep:
            os.unlink(path)
    txt = [f"### P8 big remote file: {size / 1e9:.1f} GB, {args.big_chunks:,} incompressible 8 KiB chunks "
           f"(built in {built:.0f} s{', then deleted' if not args.keep else ''})", "", remote_table(res, skipped), ""]
    ri, h5 = res["refindex"], res["h5py + fsspec 8 MiB blockcache, chunk_iter"]
    if ri.get("status") == "ok":
        ci = ri["own_stats"]["chunk_index"]
        nodes, node_bytes = ci["index_bytes"] // 2096, ci["index_bytes"]
        txt.append(f"- refindex read {ci['index_bytes'] / 1e6:.1f} MB of B-tree nodes (~{nodes:,} nodes of 2,096 bytes) "
                   f"in {ci['index_fetches']} fetches, one per tree level (each a batch of concurrent requests)")
        if h5.get("status") == "ok":
            ratio = ri["seconds"] / h5["seconds"]
            txt.append(f"- time vs h5py + 8 MiB blockcache: {ratio:.3f}x (goal <= 1/20 = 0.05): {verdict(ratio <= 0.05)}")
        txt.append(f"- bytes fetched {ri['bytes'] / 1e6:.1f} MB = {ri['bytes'] / node_bytes:.2f}x the nodes' bytes "
                   f"(goal <= 3x): {verdict(ri['bytes'] <= 3 * node_bytes)}")
        txt.append(f"- requests {ri['requests']:,} for ~{nodes:,} nodes (goal: about the number of nodes, adjacent "
                   f"ones merged): {verdict(ri['requests'] <= 1.2 * nodes + 20)}; sequential rounds "
                   f"{ri['own_stats']['round_trips']}")
    txt.append("")
    return "\n".join(txt)


def many_section(args: argparse.Namespace) -> str:
    from datafiles import many_chunks

    path = str(many_chunks(args.rows, 1000, 2))
    n = args.rows * 1000 // 4
    res = remote(path, args.latency_ms / 1000, args.bandwidth_mbs * 1e6, args.timeout, set())
    txt = [f"### P8 remote file of {n:,} gzip chunks ({os.path.getsize(path) / 1e6:.0f} MB)", "",
           remote_table(res, {}), ""]
    ri, h5 = res["refindex"], res["h5py + fsspec 8 MiB blockcache, chunk_iter"]
    if ri.get("status") == "ok" and h5.get("status") == "ok":
        ratio = ri["seconds"] / h5["seconds"]
        txt.append(f"- time vs h5py + 8 MiB blockcache: {ratio:.2f}x (goal <= 0.5x): {verdict(ratio <= 0.5)}")
    txt.append("")
    return "\n".join(txt) + "\n" + local_section(path, n, args)


def whole_processes(cmds: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    """Wall seconds of ``runs`` fresh processes of each command, interleaved (a, b, a, b, ...)."""
    out: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            out[name].append(time.perf_counter() - t0)
    return out


BARE_CHUNK_ITER = ("import sys, h5py\n"
                   "n = [0]\n"
                   "with h5py.File(sys.argv[1], 'r') as f:\n"
                   "    f['data'].id.chunk_iter(lambda i: n.__setitem__(0, n[0] + 1))\n"
                   "print(n[0])\n")


def local_section(path: str, n: int, args: argparse.Namespace) -> str:
    """The same file locally: whole processes, in-process figures (P1's), peak memory, the writers."""
    me = os.path.abspath(__file__)
    base = os.path.join(OUT, "p8_local")
    refindex_cli = os.path.join(os.path.dirname(sys.executable), "refindex")
    procs = whole_processes({
        "refindex scan (JSON written)": [refindex_cli, "scan", path, "-o", base + ".cli.json", "--inline-threshold", "0",
                                         "--no-progress"],
        "bare chunk_iter process": [sys.executable, "-c", BARE_CHUNK_ITER, path],
    }, args.repeat)
    jobs = {"chunk_iter (in process)": (me, "floor", [path]),
            "refindex scan_to_file": (me, "local", [path, base + ".json"]),
            "refindex scan_to_file, libhdf5's chunk_iter": (me, "local", [path, base + ".old.json", "0"]),
            "kerchunk": (me, "kerchunk_local", [path, base + ".kerchunk.json"]),
            "writers": (me, "writers", [path, base + ".w"])}
    res = run_repeated(jobs, {k: (1 if k in ("kerchunk", "writers") else args.repeat) for k in jobs}, args.timeout)
    rows = [[name, "whole process", median(v), "", " ".join(f"{x:.2f}" for x in v)] for name, v in procs.items()]
    for name, r in res.items():
        if name == "writers":
            continue
        ok = r.get("status") == "ok"
        rows.append([name, "in process", r.get("seconds") if ok else None, r.get("peak_rss_mb"),
                     r.get("error", "") if not ok else " ".join(f"{x:.2f}" for x in r.get("runs", []))])
    txt = [f"### P8 local file of {n:,} chunks", "", f"Whole processes ran {args.repeat} times each, interleaved "
           "(median); in-process figures are P1's (the call alone, imports done).", "",
           table(["what", "measured", "wall s", "peak RSS MB", "runs"], rows), ""]
    cli, bare = median(procs["refindex scan (JSON written)"]), median(procs["bare chunk_iter process"])
    txt.append(f"- whole `refindex scan` process / bare chunk_iter process: {cli / bare:.2f}x (goal <= 1.0x): "
               f"{verdict(cli <= bare)}")
    fl, ri, kc = res["chunk_iter (in process)"], res["refindex scan_to_file"], res["kerchunk"]
    if fl.get("status") == "ok" and ri.get("status") == "ok":
        txt.append(f"- in process, refindex scan_to_file / chunk_iter: {ri['seconds'] / fl['seconds']:.2f}x "
                   f"(goal <= 0.5x): {verdict(ri['seconds'] <= 0.5 * fl['seconds'])}")
    if ri.get("status") == "ok" and kc.get("status") == "ok":
        rss = ri["peak_rss_mb"] / kc["peak_rss_mb"]
        txt.append(f"- peak RSS refindex / kerchunk: {rss:.0%} (goal <= 30%): {verdict(rss <= 0.3)}")
    w = res["writers"]
    if w.get("status") == "ok":
        txt.append(f"- the writers alone, {n:,} chunks (goal: well under a second, parquet suggested at this size): "
                   f"parquet {w['parquet']:.2f} s ({w['parquet_bytes'] / 1e6:.1f} MB): {verdict(w['parquet'] < 0.5)}; "
                   f"JSON {w['json']:.2f} s ({w['json_bytes'] / 1e6:.0f} MB): {verdict(w['json'] < 0.5)}")
    for p in (base + ".cli.json", base + ".json", base + ".old.json", base + ".kerchunk.json", base + ".w.json"):
        if os.path.exists(p):
            os.unlink(p)
    shutil.rmtree(base + ".w.parq", ignore_errors=True)
    txt.append("")
    return "\n".join(txt)


def main(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    if child_main(CHILDREN, argv):
        return ""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--big-chunks", type=int, default=20_000, help="chunks of the big file (500000: 4.1 GB)")
    p.add_argument("--rows", type=int, default=400, help="rows of the many-chunks file (4000: 10^6 chunks)")
    p.add_argument("--latency-ms", type=float, default=30.0)
    p.add_argument("--bandwidth-mbs", type=float, default=50.0)
    p.add_argument("--timeout", type=float, default=900, help="seconds before a tool counts as hung")
    p.add_argument("--repeat", type=int, default=5, help="runs of the fast measurements (median reported)")
    p.add_argument("--keep", action="store_true", help="keep the big file in benchmarks/out/")
    p.add_argument("--only", choices=["big", "many"], help="one section only")
    p.add_argument("--big-skip", default="", help="tools left out of the big file's runs, e.g. kerchunk,hdfparser")
    a = p.parse_args(argv)
    a.big_skip = set(filter(None, a.big_skip.split(",")))
    t0 = time.perf_counter()
    parts = []
    if a.only in (None, "big"):
        parts.append(big_section(a))
    if a.only in (None, "many"):
        parts.append(many_section(a))
    text = "\n".join(parts)
    print(text)
    print(f"(P8 took {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return text


if __name__ == "__main__":
    main()
