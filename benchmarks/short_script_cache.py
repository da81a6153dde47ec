"""What the exit wait for the cache entry costs a short script, and what it saves the next one (issue 45).

A script that opens a URL with ``refindex.h5py_file`` (or ``open_nwb``) and ends at once used to end
before the forked child making the cache entry was done: the child ended with it, and every run scanned
again.  A process that ends normally now waits for that child (``refindex.read.h5py_road._beside.EXIT_WAIT``).

Each run is a fresh interpreter, whole process timed from outside, runs interleaved, medians reported:

* ``first run, waits``: empty cache, the exit waits for the entry (the default);
* ``first run, no wait``: empty cache, ``EXIT_WAIT = 0`` (what a script did before: no entry left);
* ``next run, from the entry``: the entry the first run left, one freshness check;
* ``next run, no entry``: what every run cost before (it scanned again): the same as a first run without wait.

Usage: ``python benchmarks/short_script_cache.py [--repeat 7] [FILE]`` (default: ``refindex demo``'s NWB
file, written into a temporary folder; served over loopback HTTP by tests/webserver.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

import webserver  # noqa: E402
from common import machine, table  # noqa: E402

SCRIPT = """import sys, refindex
from refindex.read.h5py_road import _beside
if sys.argv[3] == "no-wait":
    _beside.EXIT_WAIT = 0
f = refindex.h5py_file(sys.argv[1], cache=sys.argv[2])
f.visit(lambda name: None)
"""


def _timed(url: str, cache: str, mode: str) -> tuple[float, bool]:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", SCRIPT, url, cache, mode], check=True, cwd=tempfile.gettempdir(),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    left = os.path.isdir(cache) and any(n.endswith(".refs.json") for n in os.listdir(cache))
    return seconds, left


def run(path: str, repeat: int) -> str:
    runs: dict[str, list[float]] = {k: [] for k in ("first run, waits", "first run, no wait",
                                                    "next run, from the entry")}
    entries: dict[str, int] = {k: 0 for k in runs}
    with tempfile.TemporaryDirectory() as tmp, webserver.serve() as server:
        url = server.put(os.path.basename(path), open(path, "rb").read())
        kept = os.path.join(tmp, "kept")
        _timed(url, kept, "wait")  # warm-up (and the entry the "next run" rows open)
        for _ in range(repeat):
            for name, mode in (("first run, waits", "wait"), ("first run, no wait", "no-wait")):
                cache = os.path.join(tmp, "fresh")
                shutil.rmtree(cache, ignore_errors=True)
                seconds, left = _timed(url, cache, mode)
                runs[name].append(seconds)
                entries[name] += left
            seconds, left = _timed(url, kept, "wait")
            runs["next run, from the entry"].append(seconds)
            entries["next run, from the entry"] += left
    med = {k: statistics.median(v) for k, v in runs.items()}
    rows = [[k, f"{med[k]:.3f}", f"{min(v):.3f}-{max(v):.3f}", f"{entries[k]}/{len(v)}"] for k, v in runs.items()]
    wait = med["first run, waits"] - med["first run, no wait"]
    saved = med["first run, no wait"] - med["next run, from the entry"]
    return "\n".join([
        f"short script: h5py_file(URL) of {os.path.basename(path)} ({os.path.getsize(path):,} bytes), "
        f"{repeat} runs each, interleaved; {machine()}",
        table(["run", "median s", "range s", "entry left"], rows),
        f"the exit wait adds {wait:+.3f} s (median) to a first run; the next run saves {saved:.3f} s "
        "(before, every run was a first run without an entry)"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    if args.file:
        print(run(args.file, args.repeat))
        return
    from pathlib import Path

    from refindex.demo import write_session  # the demo's NWB session (needs pynwb)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "session.nwb")
        write_session(Path(path))
        print(run(path, args.repeat))


if __name__ == "__main__":
    main()
