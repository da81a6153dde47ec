"""P10's h5py road window, profiled: every request of a cold read and every wait of libhdf5 (issue 44).

Serves P10's window file (``p10_reads.py`` makes it) on the latency store, opens it with
``refindex.h5py_file`` over its index in this process, reads one window (``small``: 800 chunks
of 16 KiB; ``big``: 80 of 156 KiB) and prints, in milliseconds from the read's start: each
request (offset, length, when its thread sent it, when its answer was in, what it carried: index
nodes or chunks) and each read of libhdf5 that waited more than 2 ms (what it waited for).
The store runs in a process of its own, as in P10; the figures are one read's, not P10's
medians: where a read's time goes.

    python benchmarks/p10_road_profile.py [small|big]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from p10_reads import OUT, window_file, window_of  # noqa: E402


@contextmanager
def store_process() -> Iterator[str]:
    """The latency store serving OUT from a process of its own: its base URL."""
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.Popen([sys.executable, os.path.join(here, "latency_store.py"), str(OUT)], stdout=subprocess.PIPE,
                         text=True)
    try:
        line = p.stdout.readline()  # "serving <folder> at <url> (Ctrl-C to stop)"
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        p.terminate()
        p.wait(10)


def main() -> None:
    import refindex
    from refindex.read.h5py_road import _file
    from refindex.source import _fetch
    from refindex.formats import pages_of_document

    name = sys.argv[1] if len(sys.argv) > 1 else "small"
    path = window_file()
    requests: list[tuple[int, int, float, float]] = []
    reads: list[tuple[int, int, float, float, str]] = []
    lock = threading.Lock()
    counted = _fetch.RangeFetcher._count

    def count(self, t0, parts, trip=None, pieces=None):  # each round trip's requests, as they complete
        now = time.perf_counter()
        with lock:
            requests.extend((a, b - a, t0, now) for a, b in parts)
        return counted(self, t0, parts, trip, pieces)

    served = _file.IndexedFile.read_range

    def read_range(self, start, end):  # each read of libhdf5, and where it was served from
        before = (self.stats.from_pages, self.stats.from_ahead)
        t = time.perf_counter()
        out = served(self, start, end)
        where = "pages" if self.stats.from_pages > before[0] else "ahead" if self.stats.from_ahead > before[1] else "file"
        reads.append((start, end - start, t, time.perf_counter(), where))
        return out

    _fetch.RangeFetcher._count = count
    _file.IndexedFile.read_range = read_range
    with store_process() as base:
        refs = refindex.scan(str(path), url=f"{base}/{path.name}", progress=False)
        refs = json.loads(json.dumps(refs))
        starts, ends = pages_of_document(refs["refindex"]["pages"], inline=None).index_ranges.get(
            "/" + name, ([], []))
        nodes = list(zip(starts.tolist(), ends.tolist())) if len(starts) else []
        a, b = window_of(name)
        with refindex.h5py_file(refs, check_source=False) as f:
            d = f[name]
            requests.clear()
            reads.clear()
            t0 = time.perf_counter()
            d[a:b]
            total = time.perf_counter() - t0
            stats = f.refindex_file.stats.as_dict()
    print(f"{name}[{a}:{b}]: {total * 1000:.1f} ms; {stats}")
    for off, n, sent, done in sorted(requests, key=lambda r: r[2]):
        held = [s for s, e in nodes if off <= s < off + n]
        what = f"{len(held)} node(s)" if held else ""
        what += (" + " if held else "") + "chunks" if n > 3 * len(held) * (8 << 10) else ""
        print(f"request {off:>10} {n:>8} B  sent {(sent - t0) * 1000:6.1f}  in {(done - t0) * 1000:6.1f}  {what}")
    for off, n, t, done, where in reads:
        if done - t > 0.002:
            print(f"wait    {off:>10} {n:>8} B  at   {(t - t0) * 1000:6.1f}  for {(done - t) * 1000:6.1f}  ({where})")
    gaps = [r[2] - q[3] for q, r in zip(reads, reads[1:])]
    print(f"{len(reads)} reads; libhdf5 between reads {sum(gaps) * 1000:.1f} ms, serving reads "
          f"{sum(r[3] - r[2] for r in reads) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
