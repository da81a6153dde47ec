"""P2: indexing a pynwb file that sits on a slow object store (the loopback latency store).

Figures per tool (each in its own process): wall time, requests and bytes the store served.
Compared: refindex (its BlockCache; also with the cache settings before issue #4),
kerchunk with fsspec's recommended settings (``default_cache_type="first"``,
``default_fill_cache=False``), and a plain h5py walk (attributes, dataset metadata and
every chunk location via ``chunk_iter``) over an fsspec file with the 'first', 'readahead'
and 8 MiB 'blockcache' caches.  Defaults are small (30,000 samples, 50 frames, ~10 MB);
``--samples 300000 --frames 850`` is the ~120 MB file of the issue (what ``make bench`` runs).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import run_child, run_repeated, session_main, table, timed, verdict  # noqa: E402
from latency_store import LatencyStore, http_storage_options  # noqa: E402

MiB = 1 << 20
OLD_CACHE = {"block_size": MiB, "first_read": 4 * MiB, "tail_read": 0, "neighbours": 0, "max_gap": 0,
             "prefetch_metadata": False}


# ------------------------------------------------------------------ measurements (child side)
def child_refindex(url: str, cache_json: str = "{}") -> dict[str, Any]:
    from refindex.api import scan  # imported before the clock starts (refindex loads lazily)
    import h5py, numcodecs, zarr  # noqa: E401,F401 - what a scan loads lazily (zarr: the reader's check), as kerchunk's imports are
    from refindex.source import FetchOptions

    stats: dict[str, Any] = {}
    cache = FetchOptions(**json.loads(cache_json))
    so = http_storage_options()  # imports aiohttp: import time is not what is measured
    refs, sec = timed(lambda: scan(url, storage_options=so, fetch=cache, stats=stats))
    return {"seconds": sec, "keys": len(refs["refs"]), "own_stats": stats}


def child_kerchunk(url: str) -> dict[str, Any]:
    from kerchunk.hdf import SingleHdf5ToZarr

    import fsspec

    so = http_storage_options()

    def go() -> dict[str, Any]:
        # fsspec's recommended settings for kerchunk (default_cache_type="first",
        # default_fill_cache=False) are s3fs/gcsfs options; the http filesystem takes them per file.
        fs = fsspec.filesystem("http", **so)
        with fs.open(url, "rb", cache_type="first") as fh:
            return SingleHdf5ToZarr(fh, url, inline_threshold=256).translate()

    refs, sec = timed(go)
    return {"seconds": sec, "keys": len(refs["refs"])}


def h5py_walk(f) -> int:
    """What any index needs from libhdf5: every attribute, dataset layout and chunk location."""
    import h5py

    n = [0]

    def visit(_name: str, obj: Any) -> None:
        for k in obj.attrs:
            try:
                obj.attrs[k]
            except (OSError, TypeError):
                pass
        if isinstance(obj, h5py.Dataset):
            obj.dtype, obj.shape, obj.compression
            if obj.chunks is not None:
                obj.id.chunk_iter(lambda _i: n.__setitem__(0, n[0] + 1))
        n[0] += 1

    f.visititems(visit)
    return n[0]


def child_h5py(url: str, cache_type: str, block_size: str = "0") -> dict[str, Any]:
    import fsspec
    import h5py

    so = http_storage_options()

    def go() -> int:
        fs = fsspec.filesystem("http", **so)
        kw = {"block_size": int(block_size)} if int(block_size) else {}
        with fs.open(url, "rb", cache_type=cache_type, **kw) as fh, h5py.File(fh, "r") as f:
            return h5py_walk(f)

    n, sec = timed(go)
    return {"seconds": sec, "objects": n}


CHILDREN = {"refindex": child_refindex, "kerchunk": child_kerchunk, "h5py": child_h5py}


# ------------------------------------------------------------------ driver (parent side)
def _own(r: dict[str, Any]) -> str:
    """refindex's own count: its GETs and how many serial waits they took."""
    st = r.get("own_stats")
    return f"{st['requests']} GETs in {st['round_trips']} round trips" if st and "round_trips" in st else ""


def run(samples: int, frames: int, latency: float, bandwidth: float, timeout: float, repeat: int = 5) -> str:
    from datafiles import nwb

    path = nwb(samples=samples, frames=frames)
    size = path.stat().st_size
    me = os.path.abspath(__file__)
    cases = [
        ("refindex", "refindex", []),
        ("refindex, cache before #4", "refindex", [json.dumps(OLD_CACHE)]),
        ("kerchunk (fsspec 'first')", "kerchunk", []),
        ("h5py + fsspec 'first'", "h5py", ["first"]),
        ("h5py + fsspec 'readahead'", "h5py", ["readahead"]),
        ("h5py + fsspec 8 MiB 'blockcache'", "h5py", ["blockcache", str(8 * MiB)]),
    ]
    with LatencyStore(path.parent, latency, bandwidth) as store:
        url = store.url(path.name)

        def measure(label: str, script: str, child: str, args: list[str]) -> dict[str, Any]:
            store.reset()
            r = run_child(script, child, args, timeout)
            r.update(store.counts())
            return r

        jobs = {label: (me, child, [url, *extra]) for label, child, extra in cases}
        # refindex takes well under a second: run 5 times (median); the slow tools once
        res = run_repeated(jobs, {label: (repeat if label.startswith("refindex") else 1) for label in jobs},
                           timeout, measure)
    rows = []
    for label, r in res.items():
        ok = r["status"] == "ok"
        runs = f"median of {len(r['runs'])}" if len(r.get("runs", [])) > 1 else ""
        rows.append([label, r["status"], r.get("seconds") if ok else None, r["requests"],
                     round(r["bytes"] / 1e6, 2), r.get("error") or "; ".join(x for x in (_own(r), runs) if x)])
    head = (f"### P2 remote index: pynwb file of {size / 1e6:.0f} MB on the latency store "
            f"({latency * 1000:.0f} ms/request, {bandwidth / 1e6:.0f} MB/s per connection)")
    txt = [head, "", table(["tool", "status", "wall s", "requests", "MB fetched", "note"], rows), "",
           "Wall time excludes imports. Requests include the HEAD that finds the file size. h5py rows walk attributes, dataset "
           "metadata and chunk locations only (less work than an index: no inline values).", ""]
    ri = res["refindex"]
    if ri["status"] == "ok":
        txt.append(f"- refindex wall {ri['seconds']:.2f} s (target <= 0.5): {verdict(ri['seconds'] <= 0.5)}; "
                   f"requests {ri['requests']} (target <= 12): {verdict(ri['requests'] <= 12)}; "
                   f"{ri['bytes'] / 1e6:.2f} MB (target <= 4): {verdict(ri['bytes'] <= 4e6)}")
        for label, r in res.items():
            if label != "refindex" and r["status"] == "ok":
                txt.append(f"- {label}: {r['seconds'] / ri['seconds']:.1f}x refindex's time, "
                           f"{r['requests'] / max(1, ri['requests']):.1f}x its requests, "
                           f"{r['bytes'] / max(1, ri['bytes']):.1f}x its bytes")
            elif label != "refindex":
                txt.append(f"- {label}: {r['status']} ({r.get('error', '')})")
    else:
        txt.append(f"- refindex failed: {ri.get('error')}")
    txt.append("")
    return "\n".join(txt)


def main(argv: list[str] | None = None) -> str:
    return session_main("P2", __doc__, CHILDREN, run, argv)


if __name__ == "__main__":
    main()
