"""P3: reading a whole remote dataset — zarr through a refindex index vs h5py over fsspec.

The P2 file's ``acquisition/ElectricalSeries/data`` is read in full from the latency store:
zarr (via fsspec's ReferenceFileSystem) fetches chunks concurrently; libhdf5 reads them one
after another through an fsspec file (the 8 MiB 'blockcache' and 'readahead' caches, the
best two in P2), or through ``refindex.h5py_file`` over the index (the h5py road: its pages,
then the chunks fetched ahead).  Every result is checked against a local h5py read.  Each reader first
reads the local copy once (imports, codec registry, thread pools: paid once per process).  The index is built
from the local copy with ``url=`` pointing at the store (not timed: that is P2).
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import digest, run_child, run_repeated, session_main, table, timed, verdict  # noqa: E402
from latency_store import LatencyStore, http_storage_options  # noqa: E402

MiB = 1 << 20
DATASET = "acquisition/ElectricalSeries/data"


# ------------------------------------------------------------------ measurements (child side)
def child_zarr(local: str, url: str) -> dict[str, Any]:
    import fsspec
    import zarr

    import refindex

    def read(refs: dict[str, Any], protocol: str, options: dict[str, Any]):
        fs = fsspec.filesystem("reference", fo=refs, remote_protocol=protocol,
                               remote_options={**options, "asynchronous": True}, asynchronous=True)
        g = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=2)
        return g[DATASET][...]

    import fsspec.implementations.http  # noqa: F401  (imports are not what is measured)

    read(refindex.scan(local), "file", {})  # warm-up: imports, codec registry, thread pool
    refs = refindex.scan(local, url=url)
    a, sec = timed(lambda: read(refs, "http", http_storage_options()))
    return {"seconds": sec, "digest": digest(a), "mb": a.nbytes / 1e6}


def child_h5py(local: str, url: str, cache_type: str, block_size: str = "0") -> dict[str, Any]:
    import fsspec
    import h5py

    import fsspec.implementations.http  # noqa: F401

    with fsspec.open(local, "rb") as fh, h5py.File(fh, "r") as f:  # warm-up, as for zarr
        f[DATASET][...]

    def go():
        fs = fsspec.filesystem("http", **http_storage_options())
        kw = {"block_size": int(block_size)} if int(block_size) else {}
        with fs.open(url, "rb", cache_type=cache_type, **kw) as fh, h5py.File(fh, "r") as f:
            return f[DATASET][...]

    a, sec = timed(go)
    return {"seconds": sec, "digest": digest(a), "mb": a.nbytes / 1e6}


def child_road(local: str, url: str) -> dict[str, Any]:
    """The h5py road (issue #23): ``h5py_file`` over the same index, then h5py's read of the whole dataset.
    The index is read without its freshness check, as the zarr row reads it (fsspec's reference filesystem
    checks nothing); libhdf5 reads the chunks through the road's read-ahead."""
    import h5py

    import refindex

    with refindex.h5py_file(refindex.scan(local), cache=False) as f:  # warm-up, as for zarr
        f[DATASET][...]
    refs = refindex.scan(local, url=url)

    def go():
        with refindex.h5py_file(refs, check_source=False) as f:
            assert isinstance(f, h5py.File)
            return f[DATASET][...]

    a, sec = timed(go)
    return {"seconds": sec, "digest": digest(a), "mb": a.nbytes / 1e6}


CHILDREN = {"zarr": child_zarr, "h5py": child_h5py, "road": child_road}


# ------------------------------------------------------------------ driver (parent side)
def run(samples: int, frames: int, latency: float, bandwidth: float, timeout: float, repeat: int = 5) -> str:
    import h5py

    from datafiles import nwb

    path = nwb(samples=samples, frames=frames)
    with h5py.File(path, "r") as f:
        d = f[DATASET]
        truth = digest(d[...])
        shape, chunks = d.shape, d.chunks
    me = os.path.abspath(__file__)
    res: dict[str, dict[str, Any]] = {}
    with LatencyStore(path.parent, latency, bandwidth) as store:
        url = store.url(path.name)
        jobs = {
            "zarr via refindex index": (me, "zarr", [str(path), url]),
            "h5py road: h5py_file(index), h5py's read": (me, "road", [str(path), url]),
            "h5py + fsspec 8 MiB 'blockcache'": (me, "h5py", [str(path), url, "blockcache", str(8 * MiB)]),
            "h5py + fsspec 'readahead'": (me, "h5py", [str(path), url, "readahead"]),
        }

        def measure(label: str, script: str, child: str, args: list[str]) -> dict[str, Any]:
            store.reset()
            r = run_child(script, child, args, timeout)
            r.update(store.counts())
            if r["status"] == "ok" and r.get("digest") != truth:
                r["status"], r["error"] = "WRONG", "values differ from a local h5py read"
            return r

        res = run_repeated(jobs, repeat, timeout, measure)
    rows = [[label, r["status"], r.get("seconds") if r["status"] == "ok" else None, r["requests"],
             round(r["bytes"] / 1e6, 2), r.get("error", "") or " ".join(f"{x:.2f}" for x in r.get("runs", []))]
            for label, r in res.items()]
    txt = [f"### P3 remote read: `{DATASET}` {shape} int16, chunks {chunks}, same store as P2", "",
           f"Each reader ran {repeat} times, interleaved; wall s is the median (every run in the last column).", "",
           table(["reader", "status", "wall s", "requests", "MB fetched", "runs"], rows), ""]
    z = res["zarr via refindex index"]
    best = min((r["seconds"] for k, r in res.items() if k.startswith("h5py +") and r["status"] == "ok"), default=None)
    if z["status"] == "ok" and best:
        ratio = best / z["seconds"]
        txt.append(f"- zarr via the index is {ratio:.1f}x faster than h5py's best cache (target >= 3x): "
                   f"{verdict(ratio >= 3)}")
    road = res["h5py road: h5py_file(index), h5py's read"]
    cache = res["h5py + fsspec 8 MiB 'blockcache'"]
    if road["status"] == "ok" and z["status"] == "ok" and cache["status"] == "ok":
        ratio = cache["seconds"] / road["seconds"]
        met = road["seconds"] <= z["seconds"] and ratio >= 4
        txt.append(f"- h5py road (issue #23): {road['seconds']:.3f} s, at least as fast as zarr via the index "
                   f"({z['seconds']:.3f} s) and >= 4x faster than h5py + fsspec 8 MiB 'blockcache' "
                   f"({cache['seconds']:.3f} s: {ratio:.1f}x): {verdict(met)}")
    txt.append("")
    return "\n".join(txt)


def main(argv: list[str] | None = None) -> str:
    return session_main("P3", __doc__, CHILDREN, run, argv)


if __name__ == "__main__":
    main()
