"""Mutation fuzzing of the scanner: damaged real files must fail cleanly or index exactly.

Each case mutates a small real HDF5 file (bit flips, truncation, zeroed or 0xFF
ranges, mostly in the metadata near the start of the file where superblock, object
headers, B-trees and heaps live) and runs scan-to-file + verify in an isolated
:class:`~refindex.isolation.worker.Worker`.  Allowed outcomes: ``exact`` (every dataset h5py
can read reads back identical through the index) or a ``RefindexError``.  Findings:
``mismatch`` (an index that reads different values: silently wrong; ``index-read-error``,
where zarr's codec refuses a damaged chunk that h5py decodes anyway, is loud and allowed), ``internal`` (an
exception that is not a RefindexError), ``partial`` (output or temp file left behind
after a failure); ``crash``/``hang`` are libhdf5 failures caught by the isolation.
Used by ``tests/test_fuzz.py`` (short) and ``benchmarks/fuzz_long.py`` (long).
"""

from __future__ import annotations

import csv
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..errors import IndexMismatch, RefindexError, WorkerCrashed, WorkerTimeout
from ..isolation.worker import Worker

H5_SUFFIXES = (".h5", ".hdf5", ".nwb", ".he5", ".hdf", ".nc", ".h5ad")


def corpus_files(corpus: str, *, max_size: int = 64 << 10, limit: int | None = None) -> list[str]:
    """Small files of the shared corpus (from its MANIFEST.tsv), smallest first."""
    manifest = os.path.join(corpus, "MANIFEST.tsv")
    rows = []
    with open(manifest, newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            path = os.path.join(corpus, row["relpath"])
            try:
                size = int(row["size_bytes"])
            except (TypeError, ValueError):
                continue
            if size <= max_size and row["relpath"].lower().endswith(H5_SUFFIXES) and os.path.exists(path):
                rows.append((size, path))
    rows.sort()
    paths = [p for _, p in rows]
    if limit is not None and len(paths) > limit:  # spread the pick over the size range
        step = len(paths) / limit
        paths = [paths[int(i * step)] for i in range(limit)]
    return paths


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One random mutation of ``data``: (description, new bytes)."""
    n = len(data)
    hot = min(n, 4096)  # superblock, root object header, first B-tree/heap nodes
    kind = rng.choice(["flip", "flip", "flip", "flip_hot", "flip_hot", "truncate", "zero", "zero_hot", "ff"])
    buf = bytearray(data)
    if kind in ("flip", "flip_hot"):
        k = rng.randint(1, 8)
        span = hot if kind == "flip_hot" else n
        where = sorted(rng.randrange(span) for _ in range(k))
        for pos in where:
            buf[pos] ^= 1 << rng.randrange(8)
        return f"{kind} bits at {where}", bytes(buf)
    if kind == "truncate":
        cut = rng.randrange(1, n)
        return f"truncate to {cut}", bytes(buf[:cut])
    span = hot if kind == "zero_hot" else n
    start = rng.randrange(span)
    length = rng.randint(1, 256)
    fill = 0xFF if kind == "ff" else 0
    end = min(n, start + length)
    buf[start:end] = bytes([fill]) * (end - start)
    return f"{kind} {start}-{end}", bytes(buf)


def case(source: str, output: str, verify_data: bool = True) -> dict[str, Any]:
    """Worker job: scan ``source`` to ``output``, then verify the index against the file."""
    from ..api import scan_to_file
    from ..read import verify

    refs = scan_to_file(source, output, return_refs=True)["refs"]
    if not verify_data:
        return {"status": "exact", "datasets": 0}
    report = verify(source, refs)
    problems = [r for r in report.problems() if r.status not in ("skipped", "h5py-unreadable")]
    bad = [f"{r.status} {r.path} {r.detail}"[:200] for r in problems]
    if problems and all(_inlined_by_h5py(refs, r.path) or _h5py_unstable(source, r.path) for r in problems):
        # e.g. a filter plugin decoding a corrupted stream differently on every read:
        # there is no single right answer to index, and refindex did not invent one.
        return {"status": "h5py-nondeterministic", "datasets": len(report.results), "problems": bad[:3]}
    if problems and all(r.status == "unreadable" for r in problems):
        # h5py decodes the damaged stream into some values, zarr's codec refuses it: loud, not wrong.
        return {"status": "index-read-error", "datasets": len(report.results), "problems": bad[:3]}
    return {"status": "exact" if report.ok else "mismatch", "datasets": len(report.results), "problems": bad[:3]}


def _inlined_by_h5py(refs: dict[str, Any], path: str) -> bool:
    """The index holds values h5py itself decoded at scan time (no zarr codec for the filter); a plain
    index notes that in its provenance, an HDMF one in the array's attributes (refindex.read.notes)."""
    import json

    from ..read import notes

    attrs = refs["refs"].get(path.strip("/") + "/.zattrs")
    return "refindex_inlined" in notes(refs, path.strip("/")) or (
        isinstance(attrs, str) and "refindex_inlined" in json.loads(attrs))


def _h5py_unstable(source: str, path: str) -> bool:
    """True when two fresh h5py opens read different bytes for dataset ``path``."""
    import h5py

    reads = []
    for _ in range(2):
        try:
            with h5py.File(source, "r") as f:
                reads.append(f[path][()].tobytes())
        except Exception:
            return False
    return reads[0] != reads[1]


@dataclass
class FuzzReport:
    runs: int = 0
    outcomes: Counter = field(default_factory=Counter)  # exact / error:<Class> / crash / hang / ...
    findings: list[str] = field(default_factory=list)  # mismatch, internal, partial: details
    notes: list[str] = field(default_factory=list)  # crashes/hangs caught by isolation
    files: set = field(default_factory=set)
    seconds: float = 0.0
    workers_started: int = 0

    def summary(self) -> str:
        lines = [f"runs {self.runs} over {len(self.files)} files in {self.seconds:.1f} s "
                 f"({self.workers_started} worker processes)"]
        for k, v in sorted(self.outcomes.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {k:40s} {v}")
        lines.append(f"  crashes caught {self.outcomes.get('crash', 0)}, hangs caught {self.outcomes.get('hang', 0)}, "
                     f"findings {len(self.findings)}")
        return "\n".join(lines)


def _leftovers(folder: str) -> list[str]:
    return [n for n in os.listdir(folder) if n.startswith(".refindex-")]


def run(files: list[str], workdir: str, *, seed: int = 0, per_file: int = 20, budget: float = 60.0,
        timeout: float = 10.0, memory_limit: int | None = 4 << 30, verify_data: bool = True,
        keep: str | None = None) -> FuzzReport:
    """Fuzz ``files`` (``per_file`` mutations each, round-robin) until done or ``budget`` seconds pass.

    ``keep``: folder where the mutated inputs of findings, crashes and hangs are saved.
    """
    rng = random.Random(seed)
    report = FuzzReport()
    originals = {p: open(p, "rb").read() for p in files}
    t0 = time.perf_counter()
    with Worker(memory_limit=memory_limit) as worker:
        for i in range(per_file):
            for path in files:
                if time.perf_counter() - t0 > budget:
                    break
                what, data = mutate(originals[path], rng)
                before = len(report.findings) + len(report.notes)
                _one(worker, path, what, data, i, workdir, timeout, verify_data, report)
                if keep and len(report.findings) + len(report.notes) > before:
                    os.makedirs(keep, exist_ok=True)
                    with open(os.path.join(keep, f"{report.runs:05d}-{os.path.basename(path)}"), "wb") as fh:
                        fh.write(data)
        report.workers_started = worker.started
    report.seconds = time.perf_counter() - t0
    return report


def _one(worker: Worker, path: str, what: str, data: bytes, i: int, workdir: str, timeout: float,
         verify_data: bool, report: FuzzReport) -> None:
    name = os.path.basename(path)
    folder = os.path.join(workdir, f"case{i % 2}")
    os.makedirs(folder, exist_ok=True)
    src = os.path.join(folder, name)
    out = os.path.join(folder, name + ".refs.json")
    for p in (src, out):
        if os.path.exists(p):
            os.unlink(p)
    with open(src, "wb") as fh:
        fh.write(data)
    label = f"{name} [{what}]"
    report.runs += 1
    report.files.add(path)
    try:
        result = worker.run(case, {"source": src, "output": out, "verify_data": verify_data},
                            timeout=timeout)
        outcome = result["status"]
        if outcome == "h5py-nondeterministic":
            report.notes.append(f"h5py reads differ between opens {label}: {result['problems']}")
        if outcome == "mismatch":
            report.findings.append(f"mismatch {label}: {result['problems']}")
    except WorkerCrashed as e:
        outcome = "crash"
        report.notes.append(f"crash {label}: {e.reason}")
    except WorkerTimeout as e:
        outcome = "hang"
        report.notes.append(f"hang {label}: {e.reason}")
    except RefindexError as e:
        if getattr(e, "internal", False):
            outcome = "internal"
            report.findings.append(f"internal {label}: {e.reason}")
        elif isinstance(e, IndexMismatch):  # check mode: a native chunk table other than libhdf5's
            outcome = "mismatch"
            report.findings.append(f"chunk index mismatch {label}: {e.reason}")
        else:
            outcome = f"error:{type(e).__name__}"
        if os.path.exists(out):
            report.findings.append(f"partial {label}: {out} left after an error")
    leftovers = _leftovers(folder)
    if leftovers:
        report.findings.append(f"partial {label}: temp files {leftovers}")
        for n in leftovers:
            os.unlink(os.path.join(folder, n))
    report.outcomes[outcome] += 1
