"""Command line: ``refindex scan|batch|verify|info|schema|demo``."""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from typing import Any, Sequence

from .errors import RefindexError

EXIT_OK, EXIT_DIFFERENT, EXIT_ERROR = 0, 1, 2


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


def _default_output(source: str) -> str:
    name = source.rstrip("/").rsplit("/", 1)[-1]
    return name + ".refs.json"


def cmd_scan(args: argparse.Namespace) -> int:
    from .api import scan
    from .writers import write_json

    stats: dict[str, Any] = {}
    t0 = time.perf_counter()
    sink = _parquet_sink(args) or _json_sink(args)
    refs = scan(
        args.source,
        url=args.url,
        storage_options=args.storage_options,
        convention=args.convention,
        inline_threshold=args.inline_threshold,
        inline_dataset_threshold=args.inline_dataset_threshold,
        inline_max=args.inline_max,
        contiguous_chunk_bytes=args.contiguous_chunk_bytes if args.contiguous_chunk_bytes is not None else "default",
        on_unsupported=args.on_unsupported,
        stats=stats,
        follow_external=getattr(args, "follow_external", False),
        allowed_root=args.allowed_root,
        allow_outside=args.allow_outside,
        max_inline_total=args.max_inline_total if args.max_inline_total is not None else "default",
        isolate=args.isolate,
        timeout=args.timeout,
        sink=sink,
        progress=not args.no_progress and not args.isolate and sys.stderr.isatty(),
    )
    if args.format == "parquet":
        return _report_parquet(args, refs, stats, time.perf_counter() - t0)
    out = args.output or _default_output(args.source)
    if sink is not None:  # streamed JSON: ``refs`` is the writer's summary
        nkeys, skipped = refs["keys"], refs["skipped"]
    else:
        if getattr(args, "follow_external", False):
            from .api import _write_external

            _write_external(refs, out)
        write_json(refs, out)
        nkeys, skipped = len(refs["refs"]), refs.get("refindex", {}).get("skipped", [])
    elapsed = time.perf_counter() - t0
    print(f"wrote {out}: {nkeys} keys in {elapsed:.2f} s", file=sys.stderr)
    for s in skipped:
        print(f"skipped {s['path']}{' @' + s['attribute'] if 'attribute' in s else ''}: {s['reason']}", file=sys.stderr)
    if args.stats:
        stats["total_seconds"] = round(elapsed, 4)
        print(json.dumps(stats, indent=2))
    return EXIT_OK


def _parquet_sink(args: argparse.Namespace):
    """For ``--format parquet``: write the scanned Tree as parquet refs (streamed, no refs dict)."""
    if args.format != "parquet":
        return None
    from .parquet import make_sink

    if args.follow_external or args.isolate:
        raise RefindexError("--follow-external and --isolate are not supported with --format parquet")
    out = args.output or args.source.rstrip("/").rsplit("/", 1)[-1] + ".refs.parq"
    args.output = out
    return make_sink(out, args.storage_options, record_size=args.record_size)


def _json_sink(args: argparse.Namespace):
    """For JSON output: stream the index from the scanned Tree (no refs dict of every chunk).

    Not with --follow-external (linked files are found from the refs dict) or --isolate
    (the worker returns the dict); those write the dict as before.
    """
    if args.format != "json" or getattr(args, "follow_external", False) or args.isolate:
        return None
    from .writers import make_json_sink

    args.output = args.output or _default_output(args.source)
    return make_json_sink(args.output, args.storage_options)


def _report_parquet(args: argparse.Namespace, summary: dict[str, Any], stats: dict[str, Any], elapsed: float) -> int:
    print(f"wrote {args.output}: {summary['chunks_referenced']} chunks referenced, {summary['inline_chunks']} inline, "
          f"{summary['records']} record files, {summary['bytes']} bytes in {elapsed:.2f} s", file=sys.stderr)
    if args.stats:
        stats["total_seconds"] = round(elapsed, 4)
        print(json.dumps(stats, indent=2))
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from .verify import verify

    report = verify(args.source, args.refs, storage_options=args.storage_options,
                    check_source=not args.no_check_source)
    for r in report.results:
        if r.status != "exact" or args.verbose:
            print(f"{r.status:16s} {r.path} {r.detail}")
    print(report.summary())
    return EXIT_OK if report.ok else EXIT_DIFFERENT


def cmd_info(args: argparse.Namespace) -> int:
    from .api import info

    print(json.dumps(info(args.refs), indent=2))
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from . import schema

    kw: dict[str, Any] = {"storage_options": args.storage_options, "convention": args.convention}
    if args.check:
        report = schema.check(args.check, args.source, **kw)
        for path, message in report.differences:
            print(f"{path}: {message}")
        print(report.summary(), file=sys.stderr)
        return EXIT_OK if report.ok else EXIT_DIFFERENT
    model = schema.object_model(args.source, members_only=args.members_only, depth=args.depth, **kw)
    print(schema.dumps(model))
    return EXIT_OK


def cmd_batch(args: argparse.Namespace) -> int:
    from .batch import run_batch

    scan_kwargs: dict[str, Any] = {"convention": args.convention, "on_unsupported": args.on_unsupported}
    if args.record_size:
        scan_kwargs["record_size"] = args.record_size
    report = run_batch(args.inputs, output=args.output, workers=args.workers,
                       dask=args.dask_scheduler or ("local" if args.dask else None), force=args.force,
                       format=args.format, storage_options=args.storage_options, progress=not args.no_progress,
                       manifest=args.manifest, timeout=args.timeout, isolate=args.isolate, combine=args.combine,
                       concat_dims=args.concat_dim or ["time"], identical_dims=args.identical_dim or [],
                       check=args.check, **scan_kwargs)
    for r in report.failed:
        print(f"failed: {r.error}" if r.source in (r.error or "") else f"failed {r.source}: {r.error}", file=sys.stderr)
    for r in report.check_failed:
        for d in (r.check or {}).get("differences", []):
            print(f"check {r.source}: {d['path']}: {d['message']}", file=sys.stderr)
    print(report.summary(), file=sys.stderr)
    if report.combined:
        print(f"combined index: {report.combined}", file=sys.stderr)
    return EXIT_OK if report.ok else EXIT_DIFFERENT


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(args.dir)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="refindex", description="Index HDF5/NWB files for direct reading with zarr.")
    p.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("scan", help="index one HDF5 file (local path or fsspec URL)")
    s.add_argument("source")
    s.add_argument("-o", "--output", help="index file to write (default: <name>.refs.json here)")
    s.add_argument("--url", help="URL the references point at (default: the source)")
    s.add_argument("--storage-options", type=_json_arg, help="fsspec options as JSON, e.g. '{\"anon\": true}'")
    s.add_argument("--convention", choices=["auto", "hdmf", "plain"], default="auto")
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
    s.add_argument("--format", choices=["json", "parquet"], default="json",
                   help="json: one RFS JSON file; parquet: a folder in fsspec's LazyReferenceMapper layout")
    s.add_argument("--record-size", type=int, help="references per parquet file (--format parquet; default 100000)")
    s.add_argument("--follow-external", action="store_true",
                   help="also index files that external links point into (written beside the output)")
    s.add_argument("--allowed-root", help="folder other files (external links/storage) must be in "
                   "(default: the scanned file's folder)")
    s.add_argument("--allow-outside", action="store_true", help="let external links/storage point anywhere")
    s.add_argument("--max-inline-total", type=_size, help="most inline bytes in the whole index (default 256M)")
    s.add_argument("--isolate", action="store_true",
                   help="run libhdf5 in a worker process, so a hostile file cannot crash or hang refindex")
    s.add_argument("--timeout", type=float, help="seconds before an --isolate scan is killed (default 600)")
    s.set_defaults(func=cmd_scan)

    v = sub.add_parser("verify", help="compare every dataset read through an index with h5py")
    v.add_argument("source")
    v.add_argument("refs")
    v.add_argument("--storage-options", type=_json_arg)
    v.add_argument("-v", "--verbose", action="store_true", help="list exact datasets too")
    v.add_argument("--no-check-source", action="store_true",
                   help="compare even if the source changed since it was indexed")
    v.set_defaults(func=cmd_verify)

    i = sub.add_parser("info", help="summarise an index")
    i.add_argument("refs")
    i.set_defaults(func=cmd_info)

    z = sub.add_parser("schema", help="print the hierarchy as a Zarr Object Model (ZEP 6), or --check it")
    z.add_argument("source", metavar="REFS_OR_FILE", help="index (JSON/parquet) or HDF5 file (scanned in memory)")
    z.add_argument("--members-only", action="store_true", help="leave out attributes")
    z.add_argument("--depth", type=int, help="list members this many levels deep (0: the root alone)")
    z.add_argument("--check", metavar="TEMPLATE.json",
                   help="compare with a ZOM template instead; exit 1 on any difference (rules: refindex.schema)")
    z.add_argument("--storage-options", type=_json_arg, help="fsspec options as JSON for reading the input")
    z.add_argument("--convention", choices=["auto", "hdmf", "plain"], default="auto",
                   help="when scanning an HDF5 file")
    z.set_defaults(func=cmd_schema)

    b = sub.add_parser("batch", help="index many files (list, glob or @list.txt); resumable, parallel",
                       description="Exit code 0: all inputs indexed or up to date (and following --check); "
                       "1: some failed (see manifest).")
    b.add_argument("inputs", nargs="+", help="paths/URLs, globs ('s3://bucket/**/*.nwb') or @file-of-urls.txt")
    b.add_argument("-o", "--output", help="folder/URL prefix for indexes, mirroring the input tree "
                   "(default: beside each input)")
    b.add_argument("--manifest", help="manifest path (.jsonl or .parquet; default: refindex-manifest.jsonl in "
                   "the output or the inputs' common folder)")
    b.add_argument("--format", choices=["json", "parquet"], default="json")
    b.add_argument("--record-size", type=int, help="references per parquet file (--format parquet)")
    b.add_argument("--workers", type=int, help="local worker processes (default: cores; 0: in this process)")
    b.add_argument("--dask-scheduler", metavar="ADDRESS", help="run on a Dask cluster (tcp://host:8786)")
    b.add_argument("--dask", action="store_true", help="run on a local Dask cluster of --workers processes")
    b.add_argument("--force", action="store_true", help="rescan inputs whose index is up to date")
    b.add_argument("--storage-options", type=_json_arg, help="fsspec options as JSON (inputs and outputs)")
    b.add_argument("--timeout", type=float, help="seconds per file before its worker is killed (default 600)")
    b.add_argument("--isolate", action="store_true", help="with Dask or --workers 0: scan each file in a subprocess")
    b.add_argument("--convention", choices=["auto", "hdmf", "plain"], default="auto")
    b.add_argument("--on-unsupported", choices=["error", "skip"], default="error")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.add_argument("--combine", metavar="OUT.json", help="also merge all indexes into one (kerchunk MultiZarrToZarr; "
                   "netCDF-style datasets split along --concat-dim)")
    b.add_argument("--concat-dim", action="append", help="dimension to concatenate along (default: time; repeatable)")
    b.add_argument("--identical-dim", action="append", help="coordinate equal in every file (repeatable)")
    b.add_argument("--check", metavar="TEMPLATE.json",
                   help="check every index against a Zarr Object Model template (see `refindex schema`)")
    b.set_defaults(func=cmd_batch)

    d = sub.add_parser("demo", help="build an example NWB file, index it and read it back")
    d.add_argument("--dir", help="folder for the example files (default: a temporary folder)")
    d.set_defaults(func=cmd_demo)
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
