"""Batch indexing throughput: files/second of ``refindex.run_batch`` for 1, 2 and N workers.

Builds ``--files`` HDF5 files (each with ``--datasets`` chunked datasets, so metadata
walking dominates as in NWB files), then indexes all of them (``force=True``, fresh
output folder each time) with: refindex in this process (``workers=0``), local worker
processes (1, 2, cores), a Dask LocalCluster of ``cores`` processes, and kerchunk's
``SingleHdf5ToZarr`` in a plain loop (its own write included) as the reference.  Worker
and cluster start-up are included: that is what an operator waits for.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import machine, table  # noqa: E402


def build(folder: str, files: int, datasets: int) -> list[str]:
    import h5py
    import numpy as np

    rng = np.random.default_rng(0)
    out = []
    for i in range(files):
        path = os.path.join(folder, f"sub{i % 4}", f"f{i:04d}.h5")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with h5py.File(path, "w") as f:
            for d in range(datasets):
                g = f.require_group(f"group{d % 5}")
                g.create_dataset(f"d{d}", data=rng.integers(0, 100, (64, 64), dtype="i4"), chunks=(16, 16),
                                 compression="gzip")
                g[f"d{d}"].attrs["unit"] = "V"
        out.append(path)
    return out


def kerchunk_loop(paths: list[str], out: str) -> None:
    import ujson
    from kerchunk.hdf import SingleHdf5ToZarr

    os.makedirs(out, exist_ok=True)
    for p in paths:
        refs = SingleHdf5ToZarr(p, inline_threshold=0).translate()
        with open(os.path.join(out, os.path.basename(p) + ".json"), "w") as fh:
            fh.write(ujson.dumps(refs))


def run(files: int, datasets: int, with_dask: bool) -> str:
    import refindex

    cores = os.cpu_count() or 1
    work = tempfile.mkdtemp(prefix="bench-batch-")
    try:
        paths = build(os.path.join(work, "data"), files, datasets)
        pattern = os.path.join(work, "data", "**", "*.h5")
        rows: list[list[Any]] = []
        counts = sorted({1, 2, cores})
        configs: list[tuple[str, dict[str, Any]]] = [("in-process (workers=0)", {"workers": 0})]
        configs += [(f"{n} local worker{'s' if n > 1 else ''}", {"workers": n}) for n in counts]
        if with_dask:
            configs.append((f"Dask LocalCluster ({cores} processes)", {"dask": "local", "workers": cores}))
        base = None
        for i, (label, kw) in enumerate(configs):
            t0 = time.perf_counter()
            report = refindex.run_batch(pattern, output=os.path.join(work, f"out{i}"), force=True, progress=False,
                                        manifest=os.path.join(work, f"m{i}.jsonl"), **kw)
            sec = time.perf_counter() - t0
            assert report.ok and len(report.indexed) == files, report.summary()
            rate = files / sec
            base = base or rate
            rows.append([label, round(sec, 2), round(rate, 1), f"{rate / base:.2f}x"])
        t0 = time.perf_counter()
        try:
            kerchunk_loop(paths, os.path.join(work, "kerchunk"))
            sec = time.perf_counter() - t0
            rows.append(["kerchunk SingleHdf5ToZarr loop (1 process)", round(sec, 2), round(files / sec, 1),
                         f"{files / sec / base:.2f}x"])
        except Exception as e:  # reported, never fatal
            rows.append(["kerchunk SingleHdf5ToZarr loop", "fail", f"{type(e).__name__}: {e}"[:60], ""])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    head = (f"## Batch indexing: {files} files x {datasets} chunked datasets ({machine()}, {cores} cores)\n\n"
            "Start-up of worker processes / cluster included; ratio vs refindex in-process.\n\n")
    return head + table(["runner", "seconds", "files/s", "ratio"], rows)


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", type=int, default=120)
    p.add_argument("--datasets", type=int, default=40, help="chunked datasets per file")
    p.add_argument("--no-dask", action="store_true", help="skip the Dask LocalCluster row")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    text = run(a.files, a.datasets, not a.no_dask)
    print(text)
    return text


if __name__ == "__main__":
    main()
