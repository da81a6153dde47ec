"""P6: the output formats side by side on P1's many-chunk file, and refindex vs VirtualiZarr into Icechunk.

Part A scans P1's file (``--rows 2000``: 500,000 chunks, what ``make bench`` runs; the
default 200 rows: 50,000) into each format refindex writes: v2 JSON, v3 JSON, v3 parquet and
an Icechunk repository (wall time, peak RSS, bytes on disk per chunk).  Part B writes the
same file into a fresh Icechunk repository with refindex and with VirtualiZarr
(``open_virtual_dataset(..., parser=HDFParser()).vz.to_icechunk`` + commit; VirtualiZarr and
obstore are benchmark-only extras), and checks both repositories read the same values.
Every run is its own process, tools interleaved, medians reported; the issue sets no goal
here, so the figures and same-run ratios are printed, no met/missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import warnings
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import child_main, digest, path_size, run_child, run_repeated, table, timed  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
SAMPLE = (slice(0, 200), slice(0, 200))  # what the read check compares (10,000 chunks of 2x2)


# ------------------------------------------------------------------ measurements (child side)
def child_refindex(src: str, out: str, fmt: str, zarr_format: str) -> dict[str, Any]:
    from refindex.api import scan_to_file, scan_to_icechunk  # before the clock (refindex loads lazily)

    shutil.rmtree(out, ignore_errors=True)
    if os.path.isfile(out):
        os.remove(out)
    if fmt == "icechunk":
        import icechunk  # noqa: F401  (its import is not the scan's cost)

        _, sec = timed(lambda: scan_to_icechunk(src, out, inline_threshold=0))
    else:
        _, sec = timed(lambda: scan_to_file(src, out, format=fmt, zarr_format=int(zarr_format), inline_threshold=0))
    return {"seconds": sec, "bytes": path_size(out)}


def child_virtualizarr(src: str, out: str) -> dict[str, Any]:
    warnings.simplefilter("ignore")
    import icechunk as ic
    from obstore.store import LocalStore
    from virtualizarr import open_virtual_dataset
    from virtualizarr.parsers import HDFParser
    from virtualizarr.registry import ObjectStoreRegistry

    ic.set_logs_filter("error")
    shutil.rmtree(out, ignore_errors=True)
    folder = os.path.dirname(os.path.realpath(src)) + "/"

    def go() -> None:
        config = ic.RepositoryConfig.default()
        config.set_virtual_chunk_container(ic.VirtualChunkContainer("file://" + folder, ic.local_filesystem_store(folder)))
        repo = ic.Repository.create(ic.local_filesystem_storage(out), config=config)
        vds = open_virtual_dataset("file://" + os.path.realpath(src), parser=HDFParser(),
                                   registry=ObjectStoreRegistry({"file://": LocalStore()}))
        session = repo.writable_session("main")
        vds.vz.to_icechunk(session.store)
        session.commit("virtualizarr")

    _, sec = timed(go)
    return {"seconds": sec, "bytes": path_size(out)}


def child_read(repo: str) -> dict[str, Any]:
    """A digest of the sample region of ``data`` read from an Icechunk repository (authorizing its containers)."""
    warnings.simplefilter("ignore")
    import icechunk as ic
    import zarr

    from refindex.codecs import register_v3_codecs
    from refindex.formats.icechunk import credentials_for, declared_containers

    register_v3_codecs()
    ic.set_logs_filter("error")
    storage = ic.local_filesystem_storage(repo)
    prefixes = declared_containers(ic.Repository.fetch_config(storage))
    r = ic.Repository.open(storage, authorize_virtual_chunk_access=credentials_for(prefixes, None))
    g = zarr.open_group(r.readonly_session(branch="main").store, mode="r", zarr_format=3)
    values, sec = timed(lambda: g["data"][SAMPLE])
    return {"seconds": sec, "digest": digest(values)}


def child_h5py(src: str) -> dict[str, Any]:
    import h5py

    with h5py.File(src, "r") as f:
        return {"seconds": 0.0, "digest": digest(f["data"][SAMPLE])}


CHILDREN = {"refindex": child_refindex, "virtualizarr": child_virtualizarr, "read": child_read, "h5py": child_h5py}


# ------------------------------------------------------------------ driver (parent side)
def _rows(res: dict[str, dict[str, Any]], nchunks: int) -> list[list[Any]]:
    out = []
    for name, r in res.items():
        ok = r.get("status") == "ok"
        b = r.get("bytes")
        runs = "runs " + " ".join(f"{x:.2f}" for x in r["runs"]) if r.get("runs") else ""
        label = name if "(" in name else f"refindex {name}"  # rows name their tool (benchmarks/charts.py)
        out.append([label, "ok" if ok else r.get("status"), r.get("seconds") if ok else None, r.get("peak_rss_mb"),
                    b, (b / nchunks) if b else None, r.get("error", "") or runs])
    return out


def run(rows: int, cols: int, chunk: int, timeout: float, repeat: int) -> str:
    from datafiles import many_chunks

    src = str(many_chunks(rows, cols, chunk))
    nchunks = -(-rows // chunk) * -(-cols // chunk)
    base = os.path.join(OUT, f"p6_{rows}x{cols}")
    me = os.path.abspath(__file__)
    formats = {
        "v2 JSON": (me, "refindex", [src, base + ".v2.json", "json", "2"]),
        "v3 JSON": (me, "refindex", [src, base + ".v3.json", "json", "3"]),
        "v3 parquet": (me, "refindex", [src, base + ".v3.parq", "parquet", "3"]),
        "Icechunk (refindex)": (me, "refindex", [src, base + ".refindex.icechunk", "icechunk", "3"]),
        "Icechunk (VirtualiZarr)": (me, "virtualizarr", [src, base + ".virtualizarr.icechunk"]),
    }
    res = run_repeated(formats, repeat, timeout)
    head = ["format / tool", "status", "wall s", "peak RSS MB", "bytes on disk", "bytes/chunk", "note"]
    txt = [f"### P6 output formats and Icechunk: {rows}x{cols} float32, {chunk}x{chunk} gzip chunks "
           f"({nchunks:,} chunks)", "",
           f"refindex with inline threshold 0; each row ran {repeat} times, interleaved, each run a fresh process; "
           "wall s is the median, peak RSS the largest. Icechunk rows are a fresh repository and one commit.", "",
           table(head, _rows(res, nchunks)), ""]
    ri, vz = res["Icechunk (refindex)"], res["Icechunk (VirtualiZarr)"]
    if ri.get("status") == "ok" and vz.get("status") == "ok":
        txt.append(f"- VirtualiZarr / refindex into Icechunk, same file, same run: time {vz['seconds'] / ri['seconds']:.2f}x, "
                   f"peak RSS {vz['peak_rss_mb'] / ri['peak_rss_mb']:.2f}x")
        want = run_child(me, "h5py", [src], timeout).get("digest")
        got = {name: run_child(me, "read", [formats[name][2][1]], timeout) for name in ("Icechunk (refindex)",
                                                                                         "Icechunk (VirtualiZarr)")}
        same = all(g.get("digest") == want for g in got.values())
        txt.append(f"- both repositories read {SAMPLE[0].stop}x{SAMPLE[1].stop} values equal to h5py's: "
                   f"{'yes' if same else 'NO: ' + repr({k: v.get('digest', v.get('error')) for k, v in got.items()})}")
    v2 = res["v2 JSON"]
    for name in ("v3 JSON", "v3 parquet", "Icechunk (refindex)"):
        r = res[name]
        if v2.get("status") == "ok" and r.get("status") == "ok":
            txt.append(f"- {name} / v2 JSON: time {r['seconds'] / v2['seconds']:.2f}x, "
                       f"bytes {r['bytes'] / v2['bytes']:.2f}x")
    return "\n".join(txt + [""])


def main(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    if child_main(CHILDREN, argv):
        return ""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=200, help="rows of P1's file (2000: 500,000 chunks)")
    p.add_argument("--cols", type=int, default=1000)
    p.add_argument("--chunk", type=int, default=2)
    p.add_argument("--timeout", type=float, default=900, help="seconds before a tool counts as hung")
    p.add_argument("--repeat", type=int, default=3, help="runs of each (median reported)")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    text = run(a.rows, a.cols, a.chunk, a.timeout, a.repeat)
    print(text)
    print(f"(P6 took {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return text


if __name__ == "__main__":
    main()
