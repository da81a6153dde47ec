"""P1: scanning a local file with very many chunks — refindex vs kerchunk vs the chunk_iter floor.

Figures per tool (each in its own process): wall time, peak RSS, index size and bytes per
chunk.  ``dset.id.chunk_iter`` alone (libhdf5 listing the chunks, nothing else) is the
floor no indexer can beat.  Defaults are small (200x1000: 50,000 chunks); ``--rows 2000``
gives the 500,000-chunk file of the issue (what ``make bench`` runs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import child_main, path_size, run_child, run_repeated, table, timed, verdict  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


# ------------------------------------------------------------------ measurements (child side)
def child_floor(src: str) -> dict[str, Any]:
    import h5py

    with h5py.File(src, "r") as f:
        d = f["data"]
        n = [0]

        def cb(_info) -> None:
            n[0] += 1

        _, sec = timed(lambda: d.id.chunk_iter(cb))
    return {"seconds": sec, "chunks": n[0]}


def child_refindex(src: str, out: str, fmt: str = "json", inline: str = "0") -> dict[str, Any]:
    from refindex.api import scan_to_file  # imported before the clock starts (refindex loads lazily)
    import h5py, numcodecs, zarr  # noqa: E401,F401 - what a scan loads lazily (zarr: the reader's check), as kerchunk's imports are

    kw: dict[str, Any] = {"format": fmt}  # JSON is streamed from the chunk tables; no refs dict of every chunk
    if inline != "default":
        kw["inline_threshold"] = int(inline)
    _, sec = timed(lambda: scan_to_file(src, out, **kw))
    return {"seconds": sec, "bytes": path_size(out)}


def child_kerchunk(src: str, out: str, inline: str = "0") -> dict[str, Any]:
    from kerchunk.hdf import SingleHdf5ToZarr

    def go() -> None:
        refs = SingleHdf5ToZarr(src, src, inline_threshold=int(inline)).translate()
        with open(out, "w") as fh:
            json.dump(refs, fh)

    _, sec = timed(go)
    return {"seconds": sec, "bytes": path_size(out)}


def child_baseline() -> dict[str, Any]:
    """Peak RSS of an interpreter that merely imported the tools (what every figure includes)."""
    import h5py  # noqa: F401
    import kerchunk.hdf  # noqa: F401
    import zarr  # noqa: F401

    import refindex  # noqa: F401

    return {"seconds": 0.0}


CHILDREN = {"floor": child_floor, "refindex": child_refindex, "kerchunk": child_kerchunk, "baseline": child_baseline}


# ------------------------------------------------------------------ driver (parent side)
def run(rows: int, cols: int, chunk: int, timeout: float, repeat: int = 5) -> str:
    from datafiles import many_chunks

    src = str(many_chunks(rows, cols, chunk))
    nchunks = -(-rows // chunk) * -(-cols // chunk)
    base = os.path.join(OUT, f"p1_{rows}x{cols}")
    me = os.path.abspath(__file__)
    jobs = {
        "floor": (me, "floor", [src]),
        "refindex json": (me, "refindex", [src, base + ".refindex.json"]),
        "refindex json, default inlining": (me, "refindex", [src, base + ".refindex-inline.json", "json", "default"]),
    }
    jobs["refindex parquet"] = (me, "refindex", [src, base + ".refindex.parquet", "parquet"])
    jobs["kerchunk"] = (me, "kerchunk", [src, base + ".kerchunk.json"])
    res: dict[str, dict[str, Any]] = {"baseline": run_child(me, "baseline", [], timeout)}
    res.update(run_repeated(jobs, repeat, timeout))
    res.setdefault("refindex parquet", {"status": "n/a"})

    rows_out = []
    for name, r in res.items():
        ok = r.get("status") == "ok"
        b = r.get("bytes")
        rows_out.append([name, r.get("status") if not ok else "ok", r.get("seconds") if ok else None,
                         r.get("peak_rss_mb"), b, (b / nchunks) if b else None,
                         r.get("error", "") or ("runs " + " ".join(f"{x:.2f}" for x in r["runs"]) if r.get("runs") else "")])
    txt = [f"### P1 local scan: {rows}x{cols} float32, {chunk}x{chunk} gzip chunks ({nchunks:,} chunks)", "",
           "Reference indexes (inline threshold 0 for both tools: these ~30-byte chunks would otherwise "
           "all be copied in; the 'default inlining' row shows that). 'floor' is `dset.id.chunk_iter` "
           "alone; 'baseline' an interpreter that only imported the tools. Each tool ran "
           f"{repeat} times, interleaved, each run in a fresh process; wall s is the median, peak RSS the largest.", "",
           table(["tool", "status", "wall s", "peak RSS MB", "index bytes", "bytes/chunk", "note"], rows_out), ""]
    ri, kc, fl, pq = res["refindex json"], res["kerchunk"], res["floor"], res["refindex parquet"]
    checks = []
    if ri.get("status") == "ok" and fl.get("status") == "ok":
        ratio = ri["seconds"] / fl["seconds"]
        checks.append(f"- refindex / chunk_iter time: {ratio:.2f}x (target <= 1.5x): {verdict(ratio <= 1.5)}")
    if ri.get("status") == "ok" and kc.get("status") == "ok":
        sp = kc["seconds"] / ri["seconds"]
        rss = ri["peak_rss_mb"] / kc["peak_rss_mb"]
        checks.append(f"- kerchunk / refindex time: {sp:.1f}x faster (target >= 5x): {verdict(sp >= 5)}")
        checks.append(f"- refindex / kerchunk peak RSS: {rss:.0%} (target <= 40%): {verdict(rss <= 0.4)}")
        b0 = res["baseline"].get("peak_rss_mb")
        if b0 and kc["peak_rss_mb"] > b0:
            above = (ri["peak_rss_mb"] - b0) / (kc["peak_rss_mb"] - b0)
            checks.append(f"  (above the {b0:.0f} MB import baseline: {above:.0%})")
    elif ri.get("status") == "ok":
        checks.append(f"- kerchunk: {kc.get('status')} ({kc.get('error', '')}); no ratio")
    if ri.get("status") == "ok":
        bpc = ri["bytes"] / nchunks
        checks.append(f"- refindex JSON bytes/chunk: {bpc:.1f} (target <= 30): {verdict(bpc <= 30)}")
        fl_b = json_floor(base + ".refindex.json")
        if fl_b:
            checks.append(f"  (the least any RFS v1 JSON can spend on these chunk entries is {fl_b:.1f} B/chunk: "
                          'quoted key, colon, the shortest template reference "{{u}}", decimal offset and size, '
                          "no whitespace; fsspec's reader needs the URL field in every entry)")
    if pq.get("status") == "ok":
        bpc = pq["bytes"] / nchunks
        checks.append(f"- refindex parquet bytes/chunk: {bpc:.1f} (target <= 10): {verdict(bpc <= 10)}")
    else:
        checks.append(f"- refindex parquet: {pq.get('status')} {pq.get('error', '')}".rstrip())
    txt += checks + [""]
    return "\n".join(txt)


def run_huge(rows: int, cols: int, timeout: float) -> str:
    """10^7 chunks (defaults): refindex's streamed JSON and parquet writers, time and peak memory."""
    from datafiles import huge_chunks

    src = str(huge_chunks(rows, cols))
    n = rows * cols
    base = os.path.join(OUT, f"huge_{rows}x{cols}")
    me = os.path.abspath(__file__)
    res = {
        "floor": run_child(me, "floor", [src], timeout),
        "refindex json": run_child(me, "refindex", [src, base + ".refindex.json"], timeout),
        "refindex parquet": run_child(me, "refindex", [src, base + ".refindex.parquet", "parquet"], timeout),
    }
    rows_out = []
    for name, r in res.items():
        ok = r.get("status") == "ok"
        b = r.get("bytes")
        rows_out.append([name, r.get("status"), r.get("seconds") if ok else None, r.get("peak_rss_mb"), b,
                         (b / n) if b else None, r.get("error", "")])
    txt = [f"### P1 at scale: {rows}x{cols} uint8 in 1x1 chunks ({n:,} chunks, fixed-array index)", "",
           "One run each (kerchunk is left out at this size). The chunk table is numpy columns kept for the "
           "whole scan; both writers stream it.", "",
           table(["tool", "status", "wall s", "peak RSS MB", "index bytes", "bytes/chunk", "note"], rows_out), ""]
    fl = res["floor"]
    for name in ("refindex json", "refindex parquet"):
        r = res[name]
        if r.get("status") == "ok" and fl.get("status") == "ok":
            txt.append(f"- {name}: {r['seconds'] / fl['seconds']:.2f}x the chunk_iter floor; peak RSS "
                       f"{r['peak_rss_mb'] * 2**20 / n:.0f} bytes per chunk, the interpreter included")
    txt.append("")
    return "\n".join(txt)


def json_floor(path: str) -> float | None:
    """Bytes per referenced chunk that RFS v1 JSON cannot go below for the keys and offsets in ``path``.

    An entry is ``"key":["{{t}}",offset,size]`` plus a separating comma: a one-character
    template name is the shortest URL field fsspec's reader accepts.
    """
    try:
        with open(path) as fh:
            refs = json.load(fh)["refs"]
    except (OSError, ValueError, KeyError):
        return None
    sizes = [len(json.dumps(k)) + len(':["{{u}}",') + len(str(v[1])) + 1 + len(str(v[2])) + len("],")
             for k, v in refs.items() if isinstance(v, list) and len(v) == 3]
    return sum(sizes) / len(sizes) if sizes else None


def main(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    if child_main(CHILDREN, argv):
        return ""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=200)
    p.add_argument("--cols", type=int, default=1000)
    p.add_argument("--chunk", type=int, default=2)
    p.add_argument("--timeout", type=float, default=600, help="seconds before a tool counts as hung")
    p.add_argument("--repeat", type=int, default=5, help="runs of each tool (median reported)")
    p.add_argument("--huge-rows", type=int, default=0,
                   help="also scan a (ROWS x 1000) file of 1x1 chunks (10000: 10^7 chunks)")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    text = run(a.rows, a.cols, a.chunk, a.timeout, a.repeat)
    if a.huge_rows:
        text += "\n" + run_huge(a.huge_rows, 1000, a.timeout)
    print(text)
    print(f"(P1 took {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return text


if __name__ == "__main__":
    main()
