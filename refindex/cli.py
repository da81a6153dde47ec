"""Command line: ``refindex scan|batch|verify|info|schema|demo``.

One small parser builder and one small runner per subcommand; every runner turns the
arguments into the same typed options the Python API uses.  Heavy modules load inside
the runners, so ``refindex --help`` costs the interpreter start and argparse.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any, Sequence

from . import __version__
from .errors import RefindexError, WorkerTimeout

EXIT_OK, EXIT_DIFFERENT, EXIT_ERROR = 0, 1, 2
CONVENTIONS = ["auto", "hdmf", "plain"]


def _json_arg(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from e
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().rstrip("ib").rstrip("b")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def _default_output(source: str, fmt: str) -> str:
    name = source.rstrip("/").rsplit("/", 1)[-1]
    return name + (".refs.parq" if fmt == "parquet" else ".refs.json")


# ---------------------------------------------------------------------- scan
def add_scan(sub: Any) -> None:
    s = sub.add_parser("scan", help="index one HDF5 file (local path or fsspec URL)")
    s.add_argument("source")
    s.add_argument("-o", "--output", help="index file to write (default: <name>.refs.json here)")
    s.add_argument("--url", help="URL the references point at (default: the source)")
    s.add_argument("--storage-options", type=_json_arg, help="fsspec options as JSON, e.g. '{\"anon\": true}'")
    s.add_argument("--convention", choices=CONVENTIONS, default="auto")
    s.add_argument("--inline-threshold", type=_size, help="inline chunks smaller than this (default 256)")
    s.add_argument("--inline-dataset-threshold", type=_size,
                   help="inline whole datasets stored in fewer bytes than this (default 16K)")
    s.add_argument("--inline-max", type=_size, help="largest inline data per dataset (default 64M)")
    s.add_argument("--contiguous-chunk-bytes", type=_size,
                   help="split contiguous datasets into virtual chunks of this size (0: never; default 32M)")
    s.add_argument("--on-unsupported", choices=["error", "skip"], default="error",
                   help="what to do with a dataset that cannot be represented exactly")
    s.add_argument("--stats", action="store_true", help="print requests, bytes fetched and timings as JSON")
    s.add_argument("--no-progress", action="store_true",
                   help="no progress bar (one is drawn on stderr when it is a terminal)")
    s.add_argument("--format", choices=["json", "parquet", "icechunk"], default="json",
                   help="json: one RFS JSON file; parquet: a folder in fsspec's LazyReferenceMapper layout; "
                        "icechunk: commit into the Icechunk repository -o (a folder or s3://bucket/prefix; zarr v3)")
    s.add_argument("--group", default="", help="--format icechunk: the group the file goes to (default: the root)")
    s.add_argument("--branch", default="main", help="--format icechunk: the branch committed to (default main)")
    s.add_argument("--repository-options", type=_json_arg,
                   help="--format icechunk: s3fs-style options for the repository (default: --storage-options)")
    s.add_argument("--record-size", type=int, help="references per parquet file (--format parquet; default 100000)")
    s.add_argument("--zarr-format", type=int, choices=[2, 3], default=2,
                   help="2: .zarray/.zgroup metadata (default); 3: zarr.json documents, chunk keys c/i/j")
    s.add_argument("--follow-external", action="store_true",
                   help="also index files that external links point into (written beside the output)")
    s.add_argument("--allowed-root", help="folder other files (external links/storage) must be in "
                   "(default: the scanned file's folder)")
    s.add_argument("--allow-outside", action="store_true", help="let external links/storage point anywhere")
    s.add_argument("--max-inline-total", type=_size, help="most inline bytes in the whole index (default 256M)")
    s.add_argument("--portable", action="store_true",
                   help="copy in (decoded, within --inline-max) datasets whose chunks only refindex's own codecs "
                        "read, or fail: the index then opens with numcodecs and imagecodecs alone")
    s.add_argument("--native-index", action=argparse.BooleanOptionalAction, default=True,
                   help="list chunks with refindex's own readers of the chunk indexes, a tree level per round trip "
                        "(default); --no-native-index: with libhdf5's chunk_iter (the index is the same)")
    s.add_argument("--no-pages", dest="pages", action="store_false",
                   help="leave out the HDF5 metadata pages libhdf5 opens the file from (refindex.h5py_file; "
                        "they add 10-50 %% to an index); the zarr road does not use them")
    add_isolation(s, "scan")
    s.set_defaults(func=cmd_scan)


def add_isolation(parser: argparse.ArgumentParser, what: str) -> None:
    """``--isolate`` (the default) / ``--no-isolate`` and ``--timeout``."""
    parser.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=True,
                        help=f"{what} in a forked worker process, so a file that crashes or hangs libhdf5 ends in a "
                        "one-line error (default; --no-isolate runs libhdf5 in this process)")
    from .options import TIME_LIMIT_POLICY

    parser.add_argument("--timeout", type=float, help=f"seconds before the worker is killed (default: "
                        f"{TIME_LIMIT_POLICY}; no effect with --no-isolate)")


def scan_options(args: argparse.Namespace) -> Any:
    """The ScanOptions of ``refindex scan``'s arguments."""
    from .options import ScanOptions

    return ScanOptions.from_keywords(
        url=args.url, storage_options=args.storage_options, convention=args.convention,
        inline_threshold=args.inline_threshold, inline_dataset_threshold=args.inline_dataset_threshold,
        inline_max=args.inline_max,
        contiguous_chunk_bytes="default" if args.contiguous_chunk_bytes is None else args.contiguous_chunk_bytes,
        on_unsupported=args.on_unsupported, follow_external=args.follow_external, allowed_root=args.allowed_root,
        allow_outside=args.allow_outside, native_index=args.native_index,
        max_inline_total="default" if args.max_inline_total is None else args.max_inline_total,
        portable=args.portable, zarr_format=args.zarr_format, pages=args.pages)


def cmd_scan(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    out = args.output or _default_output(args.source, args.format)
    job = {"source": args.source, "output": out, "options": scan_options(args), "format": args.format,
           "record_size": args.record_size, "progress": not args.no_progress and sys.stderr.isatty()}
    if args.format == "icechunk":
        if not args.output:
            raise RefindexError("--format icechunk needs -o REPOSITORY (a folder or s3://bucket/prefix)")
        job = {"source": args.source, "target": icechunk_target(args), "options": job["options"],
               "progress": job["progress"]}
        runner = icechunk_job
    else:
        runner = scan_job
    summary, stats = isolated(runner, job, args, None if args.format == "icechunk" else out,
                              quiet=not job["progress"]) if args.isolate else runner(**job)
    elapsed = time.perf_counter() - t0
    if args.format == "icechunk":
        print(f"committed {summary['snapshot']} to {out} (branch {summary['branch']}, group {summary['group']}): "
              f"{summary['chunks_referenced']} chunks referenced, {summary['inline_chunks']} inline; containers "
              f"{', '.join(summary['containers']) or 'none'} in {elapsed:.2f} s", file=sys.stderr)
    elif args.format == "parquet":
        print(f"wrote {out}: {summary['chunks_referenced']} chunks referenced, {summary['inline_chunks']} inline, "
              f"{summary['records']} record files, {summary['bytes']} bytes in {elapsed:.2f} s", file=sys.stderr)
    else:
        print(f"wrote {out}: {summary['keys']} keys in {elapsed:.2f} s", file=sys.stderr)
    for s in summary.get("skipped", []):
        print(f"skipped {s['path']}{' @' + s['attribute'] if 'attribute' in s else ''}: {s['reason']}", file=sys.stderr)
    if args.stats:
        stats["total_seconds"] = round(elapsed, 4)
        print(json.dumps(stats, indent=2))
    return EXIT_OK


def scan_job(source: str, output: str, options: Any, format: str, record_size: int | None,  # noqa: A002
             progress: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """``refindex scan``'s work (in the worker when isolated): write the index; its summary and stats."""
    from .pipeline import write_index

    stats: dict[str, Any] = {}
    summary = write_index(source, output, options, format=format, record_size=record_size, stats=stats,
                          progress=progress)
    return dict(summary), stats


def icechunk_target(args: argparse.Namespace) -> Any:
    """Where ``refindex scan --format icechunk`` commits."""
    from .formats.icechunk import IcechunkTarget

    repo_options = args.repository_options if args.repository_options is not None else args.storage_options
    return IcechunkTarget(args.output, branch=args.branch, group=args.group, storage_options=repo_options,
                          source_options=args.storage_options)


def icechunk_job(source: str, target: Any, options: Any, progress: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """``refindex scan --format icechunk``'s work: one commit; its summary and stats."""
    from .pipeline import write_icechunk_index

    stats: dict[str, Any] = {}
    summary = write_icechunk_index(source, target, options, stats=stats, progress=progress)
    return dict(summary), stats


def isolated(job: Any, kwargs: dict[str, Any], args: argparse.Namespace, output: str | None = None, *,
             quiet: bool = True) -> Any:
    """``job(**kwargs)`` in a worker process (see :mod:`refindex.isolation.forked`), killed after ``--timeout``
    or a limit scaled to the input's size; what a killed worker left half-written beside
    ``output`` is removed.  ``quiet``: the worker's stderr is shown only when it ends well
    (False: it draws a progress bar)."""
    from .isolation import forked
    from . import urls
    from .options import time_limit_of

    source = kwargs["source"]
    limit = args.timeout or time_limit_of(source)

    def cleanup(pid: int) -> None:
        if output is not None and urls.is_local(output):
            from .formats import remove_leftovers

            remove_leftovers(urls.split(output)[1], pid)

    try:
        return forked.run_once(job, kwargs, timeout=limit, label=source, cleanup=cleanup, quiet=quiet)
    except WorkerTimeout as e:
        raise WorkerTimeout(f"{e.reason}; --timeout sets the limit", file=e.file) from None


# ---------------------------------------------------------------------- verify, info, schema
def add_verify(sub: Any) -> None:
    v = sub.add_parser("verify", help="compare every dataset read through an index with h5py")
    v.add_argument("source")
    v.add_argument("refs")
    v.add_argument("--storage-options", type=_json_arg)
    v.add_argument("-v", "--verbose", action="store_true", help="list exact datasets too")
    v.add_argument("--no-check-source", action="store_true",
                   help="compare even if the source changed since it was indexed")
    add_url_policy(v)
    add_repository_selection(v)
    add_isolation(v, "read the file")
    v.set_defaults(func=cmd_verify)


def add_repository_selection(p: Any) -> None:
    """``--group``/``--branch``/``--snapshot``: which index of an Icechunk repository is meant."""
    p.add_argument("--group", help="Icechunk repository: the file's group (default: the root)")
    p.add_argument("--branch", help="Icechunk repository: the branch read (default main)")
    p.add_argument("--snapshot", help="Icechunk repository: the snapshot id read (instead of a branch)")


def index_argument(args: argparse.Namespace, target: str) -> Any:
    """The index a read command names: an IcechunkIndex when a repository selection is given, else
    ``target`` as it is (an Icechunk repository is still recognised, at its root on main)."""
    if args.group is None and args.branch is None and args.snapshot is None:
        return target
    from .read import icechunk_index

    return icechunk_index(target, storage_options=args.storage_options, group=args.group, branch=args.branch,
                          snapshot=args.snapshot)


def add_url_policy(p: Any) -> None:
    """The flags that widen which URLs an index may make the reader fetch (the table in docs/security.md)."""
    p.add_argument("--allow-url", action="append", default=[], metavar="PREFIX",
                   help="let the index's chunks be read from URLs under PREFIX (or matching a *-pattern) "
                        "even where the default rules refuse them; repeatable")
    p.add_argument("--trust", action="store_true",
                   help="read whatever URLs the index names (only for an index you trust)")


def cmd_verify(args: argparse.Namespace) -> int:
    return run_command(verify_body, args, args.source)


def verify_body(args: argparse.Namespace) -> int:
    from .read import verify

    report = verify(args.source, index_argument(args, args.refs), storage_options=args.storage_options,
                    check_source=not args.no_check_source, allowed_urls=args.allow_url, trust=args.trust)
    for r in report.results:
        if r.status != "exact" or args.verbose:
            print(f"{r.status:16s} {r.path} {r.detail}")
    print(report.summary())
    return EXIT_OK if report.ok else EXIT_DIFFERENT


def add_info(sub: Any) -> None:
    i = sub.add_parser("info", help="summarise an index (or an HDF5 file's index, made on the fly)")
    i.add_argument("refs")
    i.add_argument("--storage-options", type=_json_arg, help="fsspec options as JSON for reading the input")
    add_repository_selection(i)
    add_isolation(i, "read the input")
    i.set_defaults(func=cmd_info)


def cmd_info(args: argparse.Namespace) -> int:
    return run_command(info_body, args, args.refs)


def info_body(args: argparse.Namespace) -> int:
    from .read import info

    summary = info(index_argument(args, args.refs), storage_options=args.storage_options)
    print(json.dumps(summary, indent=2))
    if summary["needs_refindex"]:
        print(f"refindex: warning: arrays in this index use refindex's own codecs "
              f"({', '.join(summary['needs_refindex'])}): a reader needs refindex installed for them "
              "(numcodecs and imagecodecs have no decoder for those HDF5 framings); `refindex scan --portable` "
              "copies such datasets in instead", file=sys.stderr)
    return EXIT_OK


def add_schema(sub: Any) -> None:
    z = sub.add_parser("schema", help="print the hierarchy as a Zarr Object Model (ZEP 6), or --check it")
    z.add_argument("source", metavar="REFS_OR_FILE", help="index (JSON/parquet) or HDF5 file (indexed first)")
    z.add_argument("--members-only", action="store_true", help="leave out attributes")
    z.add_argument("--depth", type=int, help="list members this many levels deep (0: the root alone)")
    z.add_argument("--check", metavar="TEMPLATE.json",
                   help="compare with a ZOM template instead; exit 1 on any difference (rules: refindex.read)")
    z.add_argument("--storage-options", type=_json_arg, help="fsspec options as JSON for reading the input")
    z.add_argument("--convention", choices=CONVENTIONS, default="auto", help="when scanning an HDF5 file")
    add_repository_selection(z)
    add_isolation(z, "read the input")
    z.set_defaults(func=cmd_schema)


def cmd_schema(args: argparse.Namespace) -> int:
    return run_command(schema_body, args, args.source)


def schema_body(args: argparse.Namespace) -> int:
    from .read import check, object_model, zom_json

    if args.check:
        report = check(args.check, index_argument(args, args.source), storage_options=args.storage_options,
                       convention=args.convention)
        for path, message in report.differences:
            print(f"{path}: {message}")
        print(report.summary(), file=sys.stderr)
        return EXIT_OK if report.ok else EXIT_DIFFERENT
    model = object_model(index_argument(args, args.source), members_only=args.members_only, depth=args.depth,
                         storage_options=args.storage_options, convention=args.convention)
    print(zom_json(model))
    return EXIT_OK


def run_command(body: Any, args: argparse.Namespace, source: str) -> int:
    """A subcommand that may run libhdf5 on ``source``: ``body(args)`` in a worker unless ``--no-isolate``;
    what it prints is printed here when it ends."""
    if not args.isolate:
        return body(args)
    code, out, err = isolated(command_job, {"source": source, "body": body, "args": args}, args)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


def command_job(source: str, body: Any, args: argparse.Namespace) -> tuple[int, str, str]:
    """``body(args)`` in the worker: its exit code and what it printed (``source``: the input it reads)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = body(args)
    return int(code), out.getvalue(), err.getvalue()


# ---------------------------------------------------------------------- batch, demo
def add_batch(sub: Any) -> None:
    b = sub.add_parser("batch", help="index many files (list, glob or @list.txt); resumable, parallel",
                       description="Exit code 0: all inputs indexed or up to date (and following --check); "
                       "1: some failed (see manifest).")
    b.add_argument("inputs", nargs="+", help="paths/URLs, globs ('s3://bucket/**/*.nwb') or @file-of-urls.txt")
    b.add_argument("-o", "--output", help="folder/URL prefix for indexes, mirroring the input tree "
                   "(default: beside each input)")
    b.add_argument("--manifest", help="manifest path (.jsonl or .parquet; default: refindex-manifest.jsonl in "
                   "the output or the inputs' common folder)")
    b.add_argument("--format", choices=["json", "parquet", "icechunk"], default="json",
                   help="icechunk: every file into the Icechunk repository -o (folder or s3://bucket/prefix), "
                   "one group per file, one commit")
    b.add_argument("--branch", default="main", help="--format icechunk: the branch committed to (default main)")
    b.add_argument("--repository-options", type=_json_arg,
                   help="--format icechunk: s3fs-style options for the repository (default: --storage-options)")
    b.add_argument("--record-size", type=int, help="references per parquet file (--format parquet)")
    b.add_argument("--zarr-format", type=int, choices=[2, 3], default=2, help="zarr format of the indexes (see scan)")
    b.add_argument("--workers", type=int, help="local worker processes (default: cores; 0: in this process)")
    b.add_argument("--in-flight", type=int, default=16, help="remote files each worker has in flight: their first "
                   "round trips asked together, then scanned one after another (default 16; 1: one at a time)")
    b.add_argument("--dask-scheduler", metavar="ADDRESS", help="run on a Dask cluster (tcp://host:8786)")
    b.add_argument("--dask", action="store_true", help="run on a local Dask cluster of --workers processes")
    b.add_argument("--force", action="store_true", help="rescan inputs whose index is up to date")
    b.add_argument("--storage-options", type=_json_arg, help="fsspec options as JSON (inputs and outputs)")
    from .options import TIME_LIMIT_POLICY

    b.add_argument("--timeout", type=float, help=f"seconds per file before its worker is killed (default: "
                   f"{TIME_LIMIT_POLICY})")
    b.add_argument("--isolate", action="store_true", help="with Dask or --workers 0: scan each file in a subprocess")
    b.add_argument("--convention", choices=CONVENTIONS, default="auto")
    b.add_argument("--on-unsupported", choices=["error", "skip"], default="error")
    b.add_argument("--portable", action="store_true", help="indexes that open with stock codecs only "
                   "(see `refindex scan --portable`)")
    b.add_argument("--no-pages", dest="pages", action="store_false",
                   help="indexes without the HDF5 metadata pages (see `refindex scan --no-pages`)")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.add_argument("--combine", metavar="OUT", help="also write one index of all files as one dataset along "
                   "--concat-dim, as xr.open_mfdataset reads them (OUT.json: JSON; else a parquet folder)")
    b.add_argument("--combine-mode", choices=["by_coords", "nested"], default="by_coords",
                   help="order files by their --concat-dim coordinate (default), or in input order (nested)")
    b.add_argument("--concat-dim", action="append", help="dimension to concatenate along (default: time; repeatable)")
    b.add_argument("--identical-dim", action="append", help="accepted for compatibility: every coordinate "
                   "without --concat-dim is checked equal in every file anyway")
    b.add_argument("--check", metavar="TEMPLATE.json",
                   help="check every index against a Zarr Object Model template (see `refindex schema`)")
    b.set_defaults(func=cmd_batch)


def cmd_batch(args: argparse.Namespace) -> int:
    from .batch import run_batch

    report = run_batch(args.inputs, output=args.output, workers=args.workers, in_flight=args.in_flight,
                       dask=args.dask_scheduler or ("local" if args.dask else None), force=args.force,
                       format=args.format, storage_options=args.storage_options, progress=not args.no_progress,
                       manifest=args.manifest, timeout=args.timeout, isolate=args.isolate, combine=args.combine,
                       combine_mode=args.combine_mode, concat_dims=args.concat_dim or ["time"],
                       identical_dims=args.identical_dim or [],
                       check=args.check, record_size=args.record_size, convention=args.convention,
                       on_unsupported=args.on_unsupported, portable=args.portable, zarr_format=args.zarr_format,
                       pages=args.pages, branch=args.branch, repository_options=args.repository_options)
    for r in report.failed:
        print(f"failed: {r.error}" if r.source in (r.error or "") else f"failed {r.source}: {r.error}", file=sys.stderr)
    for r in report.check_failed:
        for d in (r.check or {}).get("differences", []):
            print(f"check {r.source}: {d['path']}: {d['message']}", file=sys.stderr)
    print(report.summary(), file=sys.stderr)
    if report.combined:
        snapshot = report.extra.get("snapshot")
        print(f"combined {'dataset' if snapshot else 'index'}: {report.combined}"
              + (f" (committed {snapshot})" if snapshot else ""), file=sys.stderr)
    if args.format == "icechunk" and not args.combine:
        extra = report.extra
        said = f"committed {extra['snapshot']}" if extra.get("snapshot") else "nothing committed"
        print(f"{said} to {extra['repository']} (branch {extra['branch']}); containers "
              f"{', '.join(extra.get('containers') or []) or 'none'}", file=sys.stderr)
    if report.manifest_error:
        print(f"refindex: error: {report.manifest_error} (the results above are not recorded: a re-run does "
              "their work again; --manifest PATH puts the manifest elsewhere)", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK if report.ok else EXIT_DIFFERENT


def add_demo(sub: Any) -> None:
    d = sub.add_parser("demo", help="build an example NWB file, index it and read it back")
    d.add_argument("--dir", help="folder for the example files (default: a temporary folder)")
    d.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(args.dir)
    return EXIT_OK


# ---------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="refindex", description="Index HDF5/NWB files for direct reading with zarr.")
    p.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    p.add_argument("--version", action="version", version=f"refindex {__version__}",
                   help="print refindex's version and exit")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (add_scan, add_verify, add_info, add_schema, add_batch, add_demo):
        add(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except RefindexError as e:
        if args.debug:
            traceback.print_exc()
            if getattr(e, "worker_traceback", None):
                print("in the worker process:\n" + e.worker_traceback, file=sys.stderr, end="")
        print(f"refindex: error: {' '.join(str(e).split())}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("refindex: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # unexpected: still one clear line unless --debug
        if args.debug:
            traceback.print_exc()
        msg = " ".join(str(e).split())
        print(f"refindex: internal error: {type(e).__name__}: {msg} (run with --debug for the trace)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
