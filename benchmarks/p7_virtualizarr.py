"""P7: refindex's VirtualiZarr parser against VirtualiZarr's own ``HDFParser`` (issue #15).

Correctness on the corpus: each parser builds the ``ManifestStore`` of each file, zarr reads
every dataset from it, and the values are compared with h5py's on the file itself.  Only
datasets xarray could hold are compared (numbers, bool, enums, strings, datetimes; not
compounds, references, sequences, opaque data, null dataspaces) and not those behind
external links; large arrays on their first and last chunks.  Per file: ``exact`` (every
such dataset present and equal), ``WRONG`` (at least one read without error but with other
values: the silent failure), ``incomplete`` (some missing or failing loudly on read, none
wrong), ``refused`` (the parser raised), ``timeout`` / ``crash``.  Each parser runs its files
one after another in a fresh process, restarted after a timeout or crash.

Cost: ``open_virtual_dataset(..., loadable_variables=[])`` of a group of 2,000 datasets and of
P1's 500,000-chunk file, each in fresh processes, interleaved, median wall time and the
largest peak RSS; ratios are HDFParser / refindex from the same run.

``--full`` runs the whole corpus (default: every third file, and 20 s per file).  The
refindex parser runs with ``on_unsupported="skip"`` and ``convention="plain"`` (NWB files as
plain arrays), its most permissive setting, as HDFParser with ``links_and_references=True`` is.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import time
import warnings
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import HERE, child_main, fmt, run_repeated, table, timed  # noqa: E402

FILE_MARK = "@@file "
PARSERS = {
    "refindex": "refindex.virtualizarr.Parser(on_unsupported='skip', convention='plain')",
    "HDFParser": "virtualizarr.parsers.HDFParser()",
    "HDFParser+refs": "virtualizarr.parsers.HDFParser(links_and_references=True)",
}
NC_DIM_ONLY = "This is a netCDF dimension but not a netCDF variable"
WHOLE = 1 << 22
MAX_CHUNKS = 256


def make_parser(name: str) -> Any:
    if name == "refindex":
        import refindex.virtualizarr

        return refindex.virtualizarr.Parser(on_unsupported="skip", convention="plain")
    from virtualizarr.parsers import HDFParser

    return HDFParser(links_and_references=name == "HDFParser+refs")


def registry() -> Any:
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore

    return ObjectStoreRegistry({"file://": LocalStore()})


# ---------------------------------------------------------------- correctness (child side)


def comparable(d: Any) -> bool:
    """A dataset xarray could hold, which h5py (the reference) reads."""
    import h5py

    if d.shape is None or NC_DIM_ONLY in str(d.attrs.get("NAME", b"")):
        return False  # no dataspace; a netCDF dimension without a variable (holds no data)
    dt = d.dtype
    if h5py.check_string_dtype(dt) is None and (dt.names is not None or h5py.check_ref_dtype(dt) is not None
                                                or h5py.check_vlen_dtype(dt) is not None or dt.subdtype is not None
                                                or dt.kind not in "biufcSUMm"):
        return False
    try:
        d[tuple(0 for _ in d.shape)] if d.size else d[()]
        return True
    except Exception:  # noqa: BLE001 - no reference value to compare with
        return False


def datasets_of(path: str) -> list[str]:
    import h5py

    out: list[str] = []
    with h5py.File(path, "r") as f:
        names: list[str] = []
        f.visit(names.append)
        for name in names:
            parent, _, base = name.rpartition("/")
            try:
                if isinstance((f[parent] if parent else f).get(base, getlink=True), h5py.ExternalLink):
                    continue
                d = f[name]
            except Exception:  # noqa: BLE001 - dangling and user-defined links
                continue
            if isinstance(d, h5py.Dataset) and comparable(d):
                out.append(name)
    return out


def selections(shape: tuple[int, ...], chunks: tuple[int, ...] | None) -> list[tuple[slice, ...]]:
    import numpy as np

    block = chunks or tuple(64 for _ in shape)
    count = np.prod([-(-n // c) for n, c in zip(shape, block)], dtype=np.float64) if chunks else 1
    if np.prod(shape, dtype=np.float64) <= WHOLE and count <= MAX_CHUNKS:
        return [tuple(slice(None) for _ in shape)]
    return [tuple(slice(0, min(c, n)) for n, c in zip(shape, block)),
            tuple(slice((max(n - 1, 0) // c) * c, n) for n, c in zip(shape, block))]


def same(a: Any, b: Any) -> bool:
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "OT" or b.dtype.kind in "OT":
        def text(x: Any) -> str:
            return x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)
        return [text(x) for x in a.ravel()] == [text(x) for x in b.ravel()]
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def check_one(parser_name: str, path: str) -> dict[str, Any]:
    """One file through one parser: counts of exact / wrong / missing / unreadable datasets."""
    import h5py
    import zarr

    names = datasets_of(path)
    t0 = time.perf_counter()
    try:
        store = make_parser(parser_name)("file://" + os.path.abspath(path), registry())
    except Exception as e:  # noqa: BLE001 - a refusal is a verdict
        return {"verdict": "refused" if names else "no data", "datasets": len(names), "error": f"{type(e).__name__}: {e}"[:160]}
    parse = time.perf_counter() - t0
    counts = {"exact": 0, "wrong": 0, "missing": 0, "unreadable": 0}
    wrong: list[str] = []
    cwd = os.getcwd()
    os.chdir(os.path.dirname(path))  # external raw data resolves against the working directory
    try:
        root = zarr.open_group(store, mode="r", zarr_format=3)
        with h5py.File(path, "r") as f:
            for name in names:
                d = f[name]
                try:
                    arr = root[name]
                except Exception:  # noqa: BLE001
                    arr = None
                if not isinstance(arr, zarr.Array):  # VirtualiZarr's store answers a missing path with its parent group
                    counts["missing"] += 1
                    continue
                try:
                    ok = all(same(d.asstr()[sel] if h5py.check_string_dtype(d.dtype) and not d.dtype.kind == "S"
                                  else d[sel], arr[sel]) for sel in selections(d.shape, d.chunks))
                except Exception:  # noqa: BLE001 - loud on read: not silent
                    counts["unreadable"] += 1
                    continue
                counts["exact" if ok else "wrong"] += 1
                if not ok:
                    wrong.append(name)
    finally:
        os.chdir(cwd)
    if not names:
        verdict = "no data"  # nothing xarray could hold that h5py reads: not counted
    elif counts["wrong"]:
        verdict = "WRONG"
    elif counts["missing"] or counts["unreadable"]:
        verdict = "incomplete"
    else:
        verdict = "exact"
    return {"verdict": verdict, "datasets": len(names), "parse_seconds": round(parse, 3), **counts,
            "wrong_names": wrong[:5]}


def child_corpus(parser_name: str, *paths: str) -> dict[str, Any]:
    """Check ``paths`` in order, one ``@@file`` line each (the parent times each file)."""
    warnings.simplefilter("ignore")
    for path in paths:
        print(FILE_MARK + json.dumps({"path": path, **check_one(parser_name, path)}), flush=True)
    return {"done": len(paths)}


# ---------------------------------------------------------------- correctness (parent side)


def run_corpus(parser_name: str, paths: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    """Every path through ``parser_name``, in as few fresh processes as timeouts and crashes allow."""
    results: dict[str, dict[str, Any]] = {}
    todo = list(paths)
    while todo:
        proc = subprocess.Popen([sys.executable, __file__, "--child", "corpus", parser_name, *todo],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=HERE,
                                env=dict(os.environ, RUST_LOG="error"))
        current, deadline = todo[0], time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                proc.kill()
                proc.wait()
                results[current] = {"verdict": "timeout"}
                break
            line = proc.stdout.readline()
            if not line:
                proc.wait()
                if current in todo and current not in results:
                    results[current] = {"verdict": "crash", "error": f"exit code {proc.returncode}"}
                break
            if line.startswith(FILE_MARK):
                out = json.loads(line[len(FILE_MARK):])
                results[out["path"]] = out
                todo.remove(out["path"])
                if not todo:
                    break
                current, deadline = todo[0], time.monotonic() + timeout
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        todo = [p for p in todo if p not in results]
    return results


def corpus_root() -> str:
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    from corpus import CORPUS

    return str(CORPUS)


def corpus_files(full: bool) -> list[str]:
    corpus_root()
    from corpus import CORPUS, manifest_rows

    files = [str(CORPUS / r["relpath"]) for r in manifest_rows() if not r["relpath"].endswith((".tsv", ".bin"))]
    return files if full else files[::3]


def corpus_section(full: bool, timeout: float) -> str:
    files = corpus_files(full)
    if not files:
        return "### P7 corpus: skipped (no corpus found)\n"
    rows, per_file = [], {}
    t0 = time.perf_counter()
    for name in PARSERS:
        res = run_corpus(name, files, timeout)
        per_file[name] = res
    empty = {p for p in files if all(per_file[n][p]["verdict"] == "no data" for n in PARSERS)}
    files = [p for p in files if p not in empty]
    for name in PARSERS:
        res = {p: per_file[name][p] for p in files}
        verdicts = [r["verdict"] for r in res.values()]
        rows.append([f"{name}: `{PARSERS[name]}`", f"{verdicts.count('exact')}/{len(files)}",
                     verdicts.count("WRONG"), sum(r.get("wrong", 0) for r in res.values()),
                     verdicts.count("incomplete"), verdicts.count("refused"), verdicts.count("timeout"),
                     verdicts.count("crash")])
    lines = [f"### P7 VirtualiZarr parsers on the corpus ({len(files)} files{'' if full else ', every third'}, "
             f"{len(empty)} more with nothing to compare; {timeout:.0f} s per file; {time.perf_counter() - t0:.0f} s)",
             "",
             table(["parser", "files exact", "files WRONG", "datasets WRONG", "files incomplete", "refused",
                    "timeout", "crash"], rows), "",
             "Files where the parsers' verdicts differ:", "",
             table(["file", *PARSERS], [[os.path.relpath(p, corpus_root()), *[_cell(per_file[n][p]) for n in PARSERS]]
                                        for p in files
                                        if len({per_file[n][p]["verdict"] for n in PARSERS}) > 1]), ""]
    return "\n".join(lines)


def _cell(r: dict[str, Any]) -> str:
    v = r["verdict"]
    if v == "WRONG":
        return f"WRONG ({r['wrong']}/{r['datasets']})"
    if v == "incomplete":
        return f"incomplete ({r['missing']} missing, {r['unreadable']} unreadable)"
    return v


# ---------------------------------------------------------------- cost


def child_open(parser_name: str, path: str) -> dict[str, Any]:
    """``open_virtual_dataset`` of ``path`` (all variables virtual): parse and total seconds."""
    warnings.simplefilter("ignore")
    import virtualizarr

    parser, reg = make_parser(parser_name), registry()
    spent: dict[str, float] = {}

    def timed_parser(url: str, registry: Any) -> Any:
        store, spent["parse"] = timed(lambda: parser(url, registry))
        return store

    vds, seconds = timed(lambda: virtualizarr.open_virtual_dataset(path, parser=timed_parser, registry=reg,
                                                                   loadable_variables=[]))
    chunks = sum(int(v.data.manifest._paths.size) for v in vds.variables.values() if hasattr(v.data, "manifest"))
    return {"seconds": seconds, "parse_seconds": spent["parse"], "variables": len(vds.variables), "chunks": chunks}


def cost_section(inputs: dict[str, str], repeat: int, timeout: float, slow_repeat: int = 1) -> str:
    """``slow_repeat``: runs of HDFParser on the many-datasets group (~2 minutes each)."""
    rows = []
    for label, path in inputs.items():
        jobs = {name: (__file__, "open", [name, path]) for name in ("refindex", "HDFParser")}
        times = {"refindex": repeat, "HDFParser": repeat if "datasets" not in label else min(repeat, slow_repeat)}
        res = run_repeated(jobs, times, timeout, medians=("parse_seconds",))
        ours, theirs = res["refindex"], res["HDFParser"]
        for name, r in res.items():
            ok = r.get("status") == "ok"
            ratio = (theirs["seconds"] / ours["seconds"]) if name == "HDFParser" and ok and ours.get("status") == "ok" \
                else None
            rows.append([label, name, fmt(r.get("seconds")) if ok else r.get("status"), fmt(r.get("parse_seconds")),
                         fmt(r.get("peak_rss_mb")), r.get("variables"), r.get("chunks"),
                         f"{ratio:.1f}×" if ratio else "–", " ".join(f"{x:.2f}" for x in r.get("runs", []))
                         or r.get("error", "")])
    return "\n".join([f"### P7 cost of `open_virtual_dataset(..., loadable_variables=[])` ({repeat} fresh processes "
                      f"each, interleaved, median; HDFParser on the group of datasets: {slow_repeat})", "",
                      table(["input", "parser", "total s", "parse s", "peak RSS MB", "variables", "chunks",
                             "HDFParser / refindex", "runs"], rows), ""])


def main(argv: list[str] | None = None) -> str:
    argv = sys.argv[1:] if argv is None else argv
    if child_main({"corpus": child_corpus, "open": child_open}, argv):
        return ""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--full", action="store_true", help="the whole corpus, 60 s per file")
    p.add_argument("--timeout", type=float, help="seconds per corpus file (default 20, 60 with --full)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--slow-repeat", type=int, default=1, help="runs of HDFParser on the group of datasets")
    p.add_argument("--datasets", type=int, default=2000)
    p.add_argument("--rows", type=int, default=2000, help="P1's file: rows x 1000 in 2x2 chunks (2000: 500k chunks)")
    a = p.parse_args(argv)
    import datafiles

    t0 = time.perf_counter()
    inputs = {f"one group of {a.datasets} datasets": str(datafiles.many_datasets(a.datasets)),
              f"P1 file ({a.rows * 250:,} chunks)": str(datafiles.many_chunks(a.rows, 1000, 2))}
    text = "\n".join([corpus_section(a.full, a.timeout or (60.0 if a.full else 20.0)),
                      cost_section(inputs, a.repeat, timeout=600, slow_repeat=a.slow_repeat)])
    print(text)
    print(f"(P7 took {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return text


if __name__ == "__main__":
    main()
