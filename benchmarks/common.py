"""Shared plumbing of the benchmark scripts: one measurement per subprocess, tables, machine facts.

Every measurement runs in a fresh interpreter (``script --child NAME ...``) so peak RSS
is that measurement's alone and a hanging third-party tool is killed at a timeout and
reported as "hang" instead of stopping the run.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "@@result "


def run_child(script: str, name: str, args: list[str], timeout: float,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script --child name args`` (in ``env``, default this process's) and return the dict it reported.

    ``status`` is "ok", "fail" (non-zero exit or exception; ``error`` holds the last line)
    or "hang" (killed after ``timeout`` seconds)."""
    cmd = [sys.executable, script, "--child", name, *args]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=HERE, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "hang", "error": f"killed after {timeout:.0f} s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(MARK):
            out = json.loads(line[len(MARK):])
            out.setdefault("status", "ok")
            return out
    lines = [ln for ln in (p.stderr or "").splitlines() if ln.strip() and "Warning" not in ln]
    err = lines[-1] if lines else f"exit code {p.returncode}"
    return {"status": "fail", "error": err[:200], "process_seconds": round(time.perf_counter() - t0, 2)}



def run_repeated(jobs: dict[str, tuple[str, str, list[str]]], repeat: int | dict[str, int], timeout: float,
                 measure: Callable[[str, str, str, list[str]], dict[str, Any]] | None = None,
                 medians: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Run every job ``repeat`` times (or ``repeat[name]``), interleaved (a, b, c, a, b, c, ...).

    Each run is its own process (``measure(name, script, child, args)``, default
    :func:`run_child`).  Wall times on shared machines move by 20-40 % between runs;
    interleaving spreads that noise over all tools alike, and the median of the runs is
    reported (``seconds``, and each key in ``medians``), with every run in ``runs`` and
    the largest peak RSS.  A job that fails or hangs once is reported as that failure.
    """
    def times(name: str) -> int:
        return max(1, repeat.get(name, 1) if isinstance(repeat, dict) else repeat)

    def default(name: str, script: str, child: str, args: list[str]) -> dict[str, Any]:
        return run_child(script, child, args, timeout)

    measure = measure or default
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in jobs}
    for round_ in range(max(times(name) for name in jobs) if jobs else 0):
        for name, (script, child, args) in jobs.items():
            if round_ >= times(name) or (runs[name] and runs[name][-1].get("status") != "ok"):
                continue
            runs[name].append(measure(name, script, child, args))
    out: dict[str, dict[str, Any]] = {}
    for name, rs in runs.items():
        bad = [r for r in rs if r.get("status") != "ok"]
        if bad:
            out[name] = bad[0]
            continue
        merged = dict(rs[-1])
        for key in ("seconds", *medians):
            if all(key in r for r in rs):
                merged[key] = median([r[key] for r in rs])
        merged["runs"] = [round(r["seconds"], 3) for r in rs]
        merged["peak_rss_mb"] = max(r.get("peak_rss_mb") or 0 for r in rs)
        out[name] = merged
    return out


def median(values: list[float]) -> float:
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def digest(a: Any) -> str:
    """dtype, shape and sha1 of an array: enough to tell two readers returned the same values."""
    import hashlib

    import numpy as np

    a = np.ascontiguousarray(a)
    return f"{a.dtype.str}{a.shape}:{hashlib.sha1(a.tobytes()).hexdigest()}"


def child_main(children: dict[str, Callable[..., dict[str, Any]]], argv: list[str]) -> bool:
    """If ``argv`` is ``--child NAME ...``, run that measurement, print its result, return True."""
    if len(argv) < 2 or argv[0] != "--child":
        return False
    name, rest = argv[1], argv[2:]
    try:
        result = children[name](*rest)
    except Exception as e:  # reported as a failed measurement, never a crash of the run
        result = {"status": "fail", "error": f"{type(e).__name__}: {e}"[:300]}
    result["peak_rss_mb"] = peak_rss_mb()
    print(MARK + json.dumps(result), flush=True)
    return True


def peak_rss_mb() -> float:
    """This process's own peak RSS.  VmHWM, not getrusage: ru_maxrss survives exec, so a child
    forked from a big parent would report the parent's size."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def path_size(path: str) -> int:
    """Bytes of a file, or of all files under a folder (parquet indexes are folders)."""
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path)


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**missed**")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as fh:
            kb = int(fh.readline().split()[1])
            mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{cpu}, {os.cpu_count()} cores{mem}; {platform.system()} {platform.release()}; Python {platform.python_version()}"


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pkg in ("refindex", "h5py", "zarr", "fsspec", "kerchunk", "pynwb", "numcodecs"):
        try:
            out.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            pass
    return ", ".join(out)


def add_session_args(parser: Any, timeout: float) -> None:
    """Options shared by the remote benchmarks: the NWB file's size and the store's speed."""
    parser.add_argument("--samples", type=int, default=30_000)
    parser.add_argument("--frames", type=int, default=50)
    parser.add_argument("--latency-ms", type=float, default=30.0)
    parser.add_argument("--bandwidth-mbs", type=float, default=50.0)
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds before a tool counts as hung")


def session_main(label: str, doc: str, children: dict[str, Callable[..., dict[str, Any]]],
                 run: Callable[..., str], argv: list[str] | None) -> str:
    """Command line of the remote benchmarks (P2, P3): a child measurement, or a whole run printed."""
    import argparse

    argv = sys.argv[1:] if argv is None else argv
    if child_main(children, argv):
        return ""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    add_session_args(p, timeout=180)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    text = run(a.samples, a.frames, a.latency_ms / 1000, a.bandwidth_mbs * 1e6, a.timeout)
    print(text)
    print(f"({label} took {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return text
