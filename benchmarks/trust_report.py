"""Issue 20's figures: the stale matrix and the messages, for whichever refindex is importable.

    python benchmarks/trust_report.py [--json out.json]

Run it in a checkout before and after a change (``PYTHONPATH=<checkout>``) to compare:

* the stale matrix: a file served by a loopback HTTP server sending ETag + Last-Modified,
  Last-Modified only, or neither, a local file, and an object in S3 (moto) is indexed
  (a saved index, and the index cache of ``refindex.open(url)``), then (1) opened unchanged,
  (2) uploaded again with the same bytes and a new time, (3) rewritten at the same size with
  two datasets' places swapped.  Each cell says what a reader got: right values, a refusal
  (StaleIndexError), or stale values read silently;
* each failure the issue lists, with the message the user sees (one line each).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import h5py
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import webserver  # noqa: E402

import refindex  # noqa: E402
from refindex.errors import RefindexError, StaleIndexError  # noqa: E402

N = 8192
A, B = np.arange(N, dtype="<i4"), -np.arange(N, dtype="<i4") - 1
SERVERS = {"ETag + Last-Modified": dict(etag=True, last_modified=True), "Last-Modified only": dict(etag=False),
           "neither": dict(etag=False, last_modified=False)}


def pair_bytes(folder: Path, swapped: bool) -> bytes:
    path = folder / ("swapped.h5" if swapped else "pair.h5")
    with h5py.File(path, "w") as f:
        for name in ("b", "a") if swapped else ("a", "b"):
            f.create_dataset(name, data=A if name == "a" else B)
    return path.read_bytes()


def outcome(read: Callable[[], Any], want: np.ndarray) -> str:
    try:
        got = read()
    except StaleIndexError:
        return "refused (StaleIndexError)"
    except RefindexError as e:
        return f"error: {e}"
    return "right values" if np.array_equal(got, want) else "STALE VALUES (silent)"


def matrix_cell(kind: str, through: str, folder: Path, s3: dict | None) -> dict[str, str]:
    original, swapped = pair_bytes(folder, False), pair_bytes(folder, True)
    t0 = 1_700_000_000.25
    with contextlib.ExitStack() as stack:
        options: dict[str, Any] = {}
        if kind in SERVERS:
            server = stack.enter_context(webserver.serve(**SERVERS[kind]))

            def put(data: bytes, mtime: float) -> str:
                return server.put("pair.h5", data, mtime)
        elif kind == "S3 (moto)":
            import s3fs

            options = dict(s3)
            fs = s3fs.S3FileSystem(**options)
            if not fs.exists("trust"):
                fs.mkdir("trust")

            def put(data: bytes, mtime: float) -> str:
                fs.pipe("trust/pair.h5", data)
                fs.invalidate_cache()
                return "s3://trust/pair.h5"
        else:
            def put(data: bytes, mtime: float) -> str:
                p = folder / "served.h5"
                p.write_bytes(data)
                os.utime(p, (mtime, mtime))
                return str(p)
        url = put(original, t0)
        cache = folder / f"cache-{kind}".replace(" ", "_")
        if through == "saved index":
            out = folder / "pair.refs.json"
            refindex.scan_to_file(url, out, storage_options=options)

            def read(name: str) -> Any:
                return refindex.open(str(out), remote_options=options)[name][:]
        else:
            def read(name: str) -> Any:
                return refindex.open(url, storage_options=options, cache=cache)[name][:]
        cells = {"unchanged": outcome(lambda: read("a"), A)}
        put(original, t0 + 1000)
        cells["same bytes, new time"] = outcome(lambda: read("a"), A)
        put(swapped, t0 + (1000 if kind in ("Last-Modified only", "neither") else 2000.5))
        cells["places swapped"] = outcome(lambda: read("a"), A)
    return cells


def stale_matrix(s3: dict | None) -> list[dict[str, str]]:
    rows = []
    for kind in [*SERVERS, "local file", "S3 (moto)"]:
        if kind == "S3 (moto)" and s3 is None:
            continue
        for through in ("saved index", "index cache"):
            with tempfile.TemporaryDirectory() as tmp:
                rows.append({"source": kind, "through": through, **matrix_cell(kind, through, Path(tmp), s3)})
    return rows


# ------------------------------------------------------------------ messages
def said(call: Callable[[], Any]) -> str:
    """What the user sees: the error's one line, plus any logged background-task tracebacks."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logging.getLogger("asyncio").addHandler(handler)
    import gc
    import warnings

    try:
        with contextlib.redirect_stderr(stream), warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            try:
                call()
                text = "(no error)"
            except Exception as e:  # noqa: BLE001
                text = f"{type(e).__name__}: {' '.join(str(e).split())}"
            gc.collect()
    finally:
        logging.getLogger("asyncio").removeHandler(handler)
    tasks = stream.getvalue().count("Task exception was never retrieved")
    return (text + (f"  [+ {tasks} 'Task exception was never retrieved' tracebacks]" if tasks else "")
            + (f"  [+ {len(warned)} warnings]" if warned else ""))


def cli(*args: str, cwd: str | None = None) -> str:
    code = "import sys; from refindex.cli import main; sys.exit(main(sys.argv[1:]))"
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                       cwd=cwd or tempfile.gettempdir())  # (not a checkout's folder: its refindex would be imported)
    lines = [line for line in r.stderr.strip().splitlines() if line.strip()]
    return f"exit {r.returncode}: " + (" | ".join(lines[-3:]) if lines else "(nothing on stderr)")


def messages(s3: dict | None, folder: Path) -> dict[str, str]:
    from conftest import free_port

    out: dict[str, str] = {}
    big = folder / "big.h5"
    with h5py.File(big, "w") as f:
        f.create_dataset("x", data=np.arange(2 << 20, dtype="<i4"))  # 8 MiB: beyond the first read
    with webserver.serve(ranges=False) as server:
        url = server.put("big.h5", big.read_bytes())
        out["server ignores Range (8 MiB file)"] = said(lambda: refindex.scan(url))
        import refindex.source as src

        failures = getattr(src, "_failures", None)
        if failures is not None:  # the whole-file fallback is for files up to 64 MiB: shrink it to show the error
            old, failures.WHOLE_FILE_FALLBACK = failures.WHOLE_FILE_FALLBACK, 1 << 20
            out["server ignores Range (file over the whole-file limit)"] = said(lambda: refindex.scan(url))
            failures.WHOLE_FILE_FALLBACK = old
    out["connection refused"] = said(lambda: refindex.scan(f"http://127.0.0.1:{free_port()}/x.nwb"))
    if s3 is not None:
        out.update(s3_messages(s3, folder))
    ro = "/sys/kernel" if os.geteuid() == 0 else str(folder / "ro")
    if ro != "/sys/kernel":
        os.makedirs(ro, exist_ok=True)
        os.chmod(ro, 0o555)
    out["scan -o into a read-only folder"] = cli("scan", str(big), "-o", f"{ro}/big.refs.json")
    out["batch -o into a read-only folder"] = cli("batch", str(big), "-o", f"{ro}/", "--workers", "0",
                                                    "--no-progress")
    nc = folder / "climate.nc"
    with h5py.File(nc, "w") as f:
        f.create_dataset("t", data=np.arange(10.0))
    env_cache = folder / "cache"
    out["open_nwb on a netCDF file"] = said(lambda: refindex.open_nwb(str(nc), cache=env_cache))
    out["  ... index cached anyway?"] = str(sorted(p.name for p in env_cache.glob("*")) if env_cache.exists() else [])
    sub = folder / "some" / "folder"
    sub.mkdir(parents=True)
    (sub / "one.h5").write_bytes(big.read_bytes())
    out["batch some/folder"] = cli("batch", str(folder / "some" / "folder"), "--workers", "0", "--no-progress")
    return out


def s3_messages(s3: dict, folder: Path) -> dict[str, str]:
    import s3fs

    fs = s3fs.S3FileSystem(**s3)
    if not fs.exists("raw"):
        fs.mkdir("raw")
    pair = folder / "pair.h5"
    pair.write_bytes(pair_bytes(folder, False))
    fs.put(str(pair), "raw/sub/pair.h5")
    refs = refindex.scan("s3://raw/sub/pair.h5", storage_options=s3)
    from refindex.demo import write_session

    nwb = folder / "session.nwb"
    write_session(nwb)
    fs.put(str(nwb), "raw/session.nwb")
    nwb_refs = refindex.scan("s3://raw/session.nwb", storage_options=s3)
    out = {}
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("AWS_")}
    os.environ.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                       "AWS_CONFIG_FILE": "/nonexistent"})
    try:
        out["S3 index opened without remote_options"] = said(lambda: refindex.open(refs)["a"][:])
        out["S3 NWB index, open_nwb without remote_options"] = said(lambda: refindex.open_nwb(nwb_refs))
    finally:
        for k in ("AWS_EC2_METADATA_DISABLED", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
            os.environ.pop(k, None)
        os.environ.update(saved)
    opts = json.dumps({k: v for k, v in s3.items()})
    out["batch s3://raw/ (a prefix)"] = cli("batch", "s3://raw/", "--storage-options", opts, "--workers", "0",
                                            "--no-progress", "-o", str(folder / "idx"))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--no-s3", action="store_true")
    args = p.parse_args()
    from conftest import moto_s3

    with contextlib.ExitStack() as stack:
        s3 = None if args.no_s3 else stack.enter_context(moto_s3())
        rows = stale_matrix(s3)
        with tempfile.TemporaryDirectory() as tmp:
            said_now = messages(s3, Path(tmp))
    print(f"refindex {refindex.__version__} from {Path(refindex.__file__).parent}")
    print("\nstale matrix (what a reader of 'a' got):")
    for r in rows:
        print(f"  {r['source']:22s} {r['through']:12s} | unchanged: {r['unchanged']:26s} | same bytes, new time: "
              f"{r['same bytes, new time']:26s} | places swapped: {r['places swapped']}")
    stale = sum(v.startswith("STALE") for r in rows for v in r.values())
    refused = sum(r[k].startswith("refused") for r in rows for k in ("unchanged", "same bytes, new time"))
    print(f"  silent stale reads: {stale}; refusals of unchanged files: {refused}")
    print("\nmessages:")
    for k, v in said_now.items():
        print(f"  {k}:\n      {v}")
    if args.json:
        Path(args.json).write_text(json.dumps({"matrix": rows, "messages": said_now}, indent=1))


if __name__ == "__main__":
    main()
