"""Index many HDF5/NWB files at once: ``refindex batch`` and :func:`run_batch`.

Archives hold thousands of files; operators index them once and publish each index
next to its data.  ``run_batch`` does that resumably, in parallel, and without letting
one bad file stop the rest.

Inputs
    A list of local paths / fsspec URLs, globs (``data/**/*.nwb``,
    ``s3://bucket/prefix/**/*.nwb``), folders and prefixes (``data/``, ``s3://bucket/raw/``:
    every file below them named as HDF5 is: ``.h5``, ``.hdf5``, ``.hdf``, ``.he5``, ``.nwb``,
    ``.nc``, ``.nc4``, ``.h5ad``), and text files of URLs (``@urls.txt``, or any input ending in
    ``.txt``: one URL per line, ``#`` comments).  Index files and manifests found by a glob or
    in a folder are left out.

Outputs
    One index per input: ``<input>.refs.json`` (``format="json"``) or the folder
    ``<input>.refs.parq`` (``format="parquet"``), written next to the input, or under
    ``output`` (a local folder or ``s3://`` prefix) mirroring the input tree below the
    inputs' common folder.  Every index appears atomically: local files are written to a
    temporary name and renamed; objects are written with a single PUT (object stores
    never show half an object); a remote parquet folder gets its record files first and
    its ``.zmetadata`` last, so readers never see a half-written index.
    ``format="icechunk"``: one Icechunk repository (``output``), one group per input, one
    commit at the end (:mod:`refindex.batch._icechunk`).

Manifest
    ``refindex-manifest.jsonl`` in ``output`` (default: the inputs' common folder), or
    any ``manifest=`` path (``.parquet`` for a parquet table).  One row per input:
    ``source``, ``index``, ``status`` (``indexed`` / ``up_to_date`` / ``failed``), the
    source's ``size`` / ``etag`` / ``mtime`` as indexed, counts (``keys``, ``arrays``,
    ``chunks``, ``inline_chunks``, ``index_bytes``), ``seconds``, ``error`` and an
    ``options`` fingerprint of the scan keywords.

Resumable and idempotent
    A re-run skips inputs whose index exists and whose source is unchanged: same size
    and the same etag (object stores) or mtime (local files) as recorded in the previous
    manifest, or, when the manifest has no row for it, in the index's own provenance
    (``refs["refindex"]["source"]``), so an interrupted batch resumes too.  Changed
    scan options, failed inputs and missing indexes are (re)scanned; ``force=True``
    rescans everything.  Failures never stop the batch; they are rows in the manifest
    and ``refindex batch`` exits with 1 when any input failed.

Parallel
    Local: ``workers`` (default: the number of cores) worker processes, each a
    :class:`refindex.isolate.Worker` fed one local file at a time, or a group of up to
    ``in_flight`` remote files whose first round trips (info, head, tail) are asked together
    before they are scanned one after another: waiting on the store then does not hold the
    worker, one round trip per group instead of one per file.  A file that crashes
    libhdf5 (segfault) or hangs past ``timeout`` seconds kills only its worker: that
    file is recorded as failed ("libhdf5 crashed (signal 11 ...)" / "timed out"; the group notes
    which file it scans, the others run again) and a fresh worker takes the next file.
    ``workers=0`` runs in this process (debugging).
    Dask: ``dask="tcp://scheduler:8786"``, ``dask="local"`` (a LocalCluster of
    ``workers`` processes) or a ``distributed.Client`` runs the same tasks (a group of
    remote files is one task, a local file another) on the cluster; only URLs and small result rows travel, each
    worker reads its source and writes its index itself (so workers need access to
    both, and the output must be storage they all see: an object store or a shared
    disk).  With dask, ``isolate=True`` additionally runs each scan in a subprocess.
    Progress (``progress``): files done/failed, files per second and the ETA, as a notebook
    widget, a terminal bar, or (a log, a pipe) a plain line every 10 s: see
    :mod:`refindex.progress`.

Combining (``combine=PATH``)
    One index of all files as one dataset along ``concat_dims`` (one dimension, default
    ``time``), meaning what ``xr.open_mfdataset(files, combine="by_coords")`` makes of them
    (``combine_mode="nested"``: input order): per-file time units decoded and encoded once,
    grids, encodings and steps checked, anything one zarr array cannot hold refused naming the
    files (:mod:`refindex.batch._combine`).  It takes each file's result as it arrives; JSON for
    ``*.json``, parquet references otherwise; with ``format="icechunk"`` one dataset in the
    repository ``combine``, replaced in one commit per run (:mod:`refindex.batch._combine_icechunk`).
    A re-run with more inputs appends: only new or changed files are scanned and only their
    indexes read, the others' digests coming from the state saved with the output
    (:mod:`refindex.batch._combine_state`; one that does not match is a full rebuild).  Needs the
    files' JSON zarr v2 indexes; one failed input refuses the combine.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Unpack

from .. import urls
from ..errors import RefindexError
from ..options import ScanKeywords, ScanOptions, options_from
from ..progress import ProgressSetting, progress_bar
from ..writers.icechunk import IcechunkTarget
from ._combine import Combiner, combine_indexes
from ._icechunk import IcechunkBatch, assign_groups, not_committed, plan_groups
from ._inputs import MANIFEST_NAME, SUFFIX, Format, common_root, expand_inputs, index_location
from ._manifest import current_infos, options_fingerprint, plan, read_manifest, write_manifest
from ._results import BatchReport, FileResult
from ._runners import run_dask, run_inline, run_local, start_workers
from ._task import Task, index_one

__all__ = ["BatchReport", "FileResult", "Task", "combine_indexes", "expand_inputs", "index_location", "index_one",
           "read_manifest", "run_batch", "write_manifest"]


def run_batch(
    inputs: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    output: str | os.PathLike | None = None,
    workers: int | None = None,
    in_flight: int = 16,
    dask: Any = None,
    force: bool = False,
    format: Format = "json",  # noqa: A002 - mirrors the CLI's --format
    storage_options: dict[str, Any] | None = None,
    progress: ProgressSetting = True,
    manifest: str | os.PathLike | None = None,
    timeout: float | None = None,
    isolate: bool = False,
    combine: str | os.PathLike | None = None,
    concat_dims: Sequence[str] = ("time",),
    identical_dims: Sequence[str] = (),
    combine_mode: str = "by_coords",
    check: Any = None,
    record_size: int | None = None,
    branch: str = "main",
    repository_options: dict[str, Any] | None = None,
    options: ScanOptions | None = None,
    **keywords: Unpack[ScanKeywords],
) -> BatchReport:
    """Index every input (paths, globs, folders, ``@urls.txt``), skipping those up to date (docs/batch.md).

    ``output``: folder / URL prefix for the indexes (default: beside each input).
    ``workers``: local worker processes (default: cores; 0: this process).  ``in_flight``: remote
    files each worker has in flight (their first round trips asked together; 1: one at a time).  ``dask``:
    ``"local"``, a scheduler address or a ``distributed.Client``.  ``timeout``: seconds
    per file before its worker is killed (default: ``refindex.options.TIME_LIMIT_POLICY``).  ``manifest``: where to write the
    manifest.  ``combine``: also write one index of all files as one dataset there.  ``check``: a
    ZEP 6 object-model template (dict or JSON path, see :mod:`refindex.read`) every index
    must follow; each row's result is in the manifest's ``check`` column.  Scan options as
    an ``options`` object and/or keywords (e.g. ``convention``, ``on_unsupported``).
    ``format="icechunk"``: ``output`` is a repository, one group per file on ``branch`` (with ``combine``: see docs).
    ``progress``: True (a notebook widget, a terminal bar, or plain lines in a log), ``"auto"``
    (only in a notebook) or False (see :mod:`refindex.progress`).
    Returns a :class:`BatchReport`; failures are in it, never raised.
    """
    _check_arguments(format, in_flight)
    scan_options = _batch_options(options, keywords, storage_options, workers, dask)
    if format == "icechunk" and combine is None:
        target = _icechunk_target(output, branch, repository_options, storage_options)
        return run_icechunk_batch(inputs, target, scan_options.but(zarr_format=3), workers=workers, dask=dask,
                                  force=force, progress=progress, manifest=manifest, timeout=timeout,
                                  isolate=isolate, check=check)
    combiner = _combiner(combine, format, scan_options, concat_dims, combine_mode, storage_options, record_size,
                         branch, repository_options)
    format = "json" if format == "icechunk" else format  # noqa: A001 - the files' own indexes: JSON
    t0 = time.perf_counter()
    sources, known = expand_inputs(inputs, storage_options)
    if not sources:
        raise RefindexError("no input files (nothing matched)")
    root = common_root(sources) if (output is not None or manifest is None) else None
    out = urls.normalise(os.fspath(output)) if output is not None else None
    manifest_url = _manifest_location(manifest, out, root)
    fingerprint = options_fingerprint(format, scan_options, record_size)
    template = _template(check)
    previous = {} if force else read_manifest(manifest_url, storage_options)
    if combiner is not None:
        combiner.prepare(fingerprint, sources, force, previous)
    n_workers, started = _workers(workers, dask, len(sources))  # starting while the plan asks the store
    rows, jobs = plan(sources, known, previous, format, out, root, fingerprint, force, storage_options)
    isolated = isolate and (dask is not None or n_workers <= 0)  # local workers are isolated anyway
    tasks = [Task(src, idx, format, scan_options, record_size, fingerprint, isolated, timeout) for _, src, idx in jobs]
    collect = _Collector(rows, {src: i for i, src, _ in jobs}, template, storage_options,
                         _progress(len(tasks), len(sources) - len(tasks), progress), combine=combiner)
    try:
        _run(tasks, dask, n_workers, timeout, collect, in_flight, started)
    finally:
        collect.close()
        # Also on interruption: what finished is recorded (unfinished inputs are simply absent).
        unsaved = save_manifest(rows, manifest_url, storage_options)
    report = BatchReport(results=[r for r in rows if r is not None], manifest=None if unsaved else manifest_url,
                         seconds=time.perf_counter() - t0, manifest_error=unsaved)
    if combiner is not None:
        combiner.finish_into(report)
    return report


def _combiner(combine: Any, format: str, scan_options: ScanOptions, concat_dims: Sequence[str],  # noqa: A002
              mode: str, storage_options: dict[str, Any] | None, record_size: int | None, branch: str,
              repository_options: dict[str, Any] | None) -> Combiner | None:
    """The combine that takes each file's result as it arrives (None: no combine), refused up front
    when the files' indexes will not be zarr v2 JSON.  ``format="icechunk"``: the files are indexed as
    JSON, the combined dataset goes into the repository ``combine`` (see :mod:`._combine_icechunk`)."""
    if combine is None:
        return None
    if format == "icechunk":
        if os.fspath(combine).rstrip("/").lower().endswith((".json", ".parq", ".parquet")):
            raise RefindexError("--combine with --format icechunk names the Icechunk repository to write (a folder "
                                f"or s3://bucket/prefix), not an index file: {os.fspath(combine)!r}")
        if scan_options.zarr_format != 2:
            raise RefindexError("--combine needs zarr v2 indexes of the files (--zarr-format 2)")
        target = _icechunk_target(combine, branch, repository_options, storage_options)
        return Combiner(target.repo, concat_dims=concat_dims, mode=mode, storage_options=storage_options,
                        icechunk=target)
    if format != "json":
        raise RefindexError("--combine needs JSON indexes of the files (format='json'); the combined index "
                            "itself is parquet unless its name ends in .json")
    if scan_options.zarr_format != 2:
        raise RefindexError("--combine needs zarr v2 indexes (--zarr-format 2)")
    return Combiner(combine, concat_dims=concat_dims, mode=mode, storage_options=storage_options,
                    record_size=record_size)


def _check_arguments(format: str, in_flight: int) -> None:  # noqa: A002
    if format not in (*SUFFIX, "icechunk"):
        raise RefindexError(f"unknown format {format!r} (json, parquet or icechunk)")
    if int(in_flight) < 1:
        raise RefindexError(f"in_flight must be at least 1 (files each worker has in flight), not {in_flight}")


def _batch_options(options: ScanOptions | None, keywords: ScanKeywords, storage_options: dict[str, Any] | None,
                   workers: int | None, dask: Any) -> ScanOptions:
    """The scan options of every file.  Several scans at once keep the cores busy: none also
    forks a helper for its walk, unless asked to."""
    chosen = options_from(options, keywords).but(storage_options=dict(storage_options or {}))
    for bad in ("url", "follow_external"):
        if getattr(chosen, bad):
            raise RefindexError(f"{bad} is not supported by batch indexing")
    if chosen.split_walk is None and (dask is not None or workers is None or int(workers) > 1):
        return chosen.but(split_walk=False)
    return chosen


def _workers(workers: int | None, dask: Any, inputs: int) -> tuple[int, list[Any]]:
    """The number of local workers, and those started already: a worker's interpreter and imports take
    about as long as a re-run's freshness checks over a remote store, so both happen at once."""
    n = (os.cpu_count() or 1) if workers is None else int(workers)
    return n, (start_workers(min(n, inputs)) if dask is None and n > 0 else [])


def _run(tasks: list[Task], dask: Any, n_workers: int, timeout: float | None, collect: Any,
         in_flight: int = 1, started: list[Any] | None = None) -> None:
    if not tasks or dask is not None or n_workers <= 0:
        for w in started or []:  # not needed after all (every input up to date)
            threading.Thread(target=w.close, daemon=True).start()
    if not tasks:
        return
    if dask is not None:
        run_dask(tasks, dask, n_workers or 1, collect, in_flight)
    elif n_workers <= 0:
        run_inline(tasks, collect, in_flight)
    else:
        run_local(tasks, min(n_workers, len(tasks)), timeout, collect, in_flight, started)


def _icechunk_target(output: Any, branch: str, repository_options: dict[str, Any] | None,
                     storage_options: dict[str, Any] | None) -> IcechunkTarget:
    """Where an Icechunk batch commits (the repository: a folder or ``s3://bucket/prefix``)."""
    if output is None:
        raise RefindexError("format='icechunk' needs output= (the repository: a folder or s3://bucket/prefix)")
    return IcechunkTarget(urls.normalise(os.fspath(output)), branch=branch,
                          storage_options=repository_options or storage_options,
                          source_options=dict(storage_options or {}))


def run_icechunk_batch(inputs: Any, target: IcechunkTarget, scan_options: ScanOptions, *, workers: int | None,
                       dask: Any, force: bool, progress: ProgressSetting, manifest: str | os.PathLike | None,
                       timeout: float | None, isolate: bool, check: Any) -> BatchReport:
    """:func:`run_batch` into one Icechunk repository: workers scan, this process writes and commits once."""
    from .. import __version__

    t0 = time.perf_counter()
    sources, known = expand_inputs(inputs, target.source_options)
    if not sources:
        raise RefindexError("no input files (nothing matched)")
    try:
        root: str | None = common_root(sources)
    except RefindexError:  # local and remote inputs: groups named by their whole paths
        root = None
    manifest_url = urls.normalise(os.fspath(manifest)) if manifest is not None else icechunk_manifest(target.repo)
    fingerprint = options_fingerprint("icechunk", scan_options, None)
    template = _template(check)
    infos = current_infos(sources, known, target.source_options)
    ice = IcechunkBatch(target, __version__)
    ice.open(sources)
    groups = assign_groups(sources, root, ice.records)
    rows, jobs = plan_groups(sources, infos, ice.records, groups, target.repo, fingerprint, force,
                             target.source_options)
    n_workers = (os.cpu_count() or 1) if workers is None else int(workers)
    isolated = isolate and (dask is not None or n_workers <= 0)
    tasks = [Task(src, target.repo, "icechunk", scan_options, None, fingerprint, isolated, timeout, group=group)
             for _, src, group in jobs]
    collect = _Collector(rows, {src: i for i, src, _ in jobs}, None, target.source_options,
                         _progress(len(tasks), len(sources) - len(tasks), progress), take=ice.take)
    try:
        _run(tasks, dask, n_workers, timeout, collect)
        ice.commit()
    except BaseException as e:
        not_committed(rows, e)
        raise
    finally:
        collect.close()
        unsaved = save_manifest(rows, manifest_url, target.storage_options)
    report = BatchReport(results=[r for r in rows if r is not None], manifest=None if unsaved else manifest_url,
                         seconds=time.perf_counter() - t0, manifest_error=unsaved,
                         extra={"repository": target.repo, "branch": target.branch, "snapshot": ice.snapshot,
                                "containers": writer_containers(ice)})
    if template is not None:
        check_groups(report.results, template, target)
    return report


def save_manifest(rows: list[FileResult | None], url: str, storage_options: dict[str, Any] | None) -> str | None:
    """Write the manifest; None, or why it could not be written (the rows stay in the report either way)."""
    try:
        write_manifest([r.as_dict() for r in rows if r is not None], url, storage_options)
    except RefindexError as e:
        return " ".join(str(e).split())
    return None


def icechunk_manifest(repo: str) -> str:
    """An Icechunk batch's manifest: beside the repository (its folder holds Icechunk's files only)."""
    name = MANIFEST_NAME.replace(".jsonl", "-" + (repo.rstrip("/").rsplit("/", 1)[-1] or "repository") + ".jsonl")
    head = repo.rstrip("/").rsplit("/", 1)[0]
    return os.path.join(head, name) if urls.is_local(repo) else head + "/" + name


def writer_containers(ice: IcechunkBatch) -> list[str]:
    """The container prefixes the repository declares (what a reader authorizes)."""
    from ..writers.icechunk import declared_containers

    return declared_containers(ice.repo.config) if ice.repo is not None else []


def check_groups(results: list[FileResult], template: Any, target: IcechunkTarget) -> None:
    """Each committed (or up-to-date) group checked against the template, read back from the branch."""
    from ..read import IcechunkIndex, check

    for r in results:
        if r.status == "failed" or r.group is None:
            continue
        index = IcechunkIndex(target.repo, group=r.group, branch=target.branch,
                              storage_options=target.storage_options, source_options=target.source_options)
        try:
            r.check = check(template, index).as_dict()
        except RefindexError as e:
            r.check = {"ok": False, "differences": [{"path": "/", "message": " ".join(str(e).split())}]}


def _manifest_location(manifest: str | os.PathLike | None, out: str | None, root: str | None) -> str:
    if manifest is not None:
        return urls.normalise(os.fspath(manifest))
    base = out if out is not None else root
    assert base is not None
    return os.path.join(base, MANIFEST_NAME) if urls.is_local(base) else base.rstrip("/") + "/" + MANIFEST_NAME


def _template(check: Any) -> Any:
    """The check template, loaded before any work (a bad template fails the batch at once)."""
    if check is None:
        return None
    from ..read import load_template

    return load_template(check)


class _Collector:
    """Takes each finished row: checks it against the template, puts it in place, moves the bar."""

    def __init__(self, rows: list[FileResult | None], position: dict[str, int], template: Any,
                 storage_options: dict[str, Any] | None, bar: Any, take: Any = None, combine: Any = None):
        self.rows, self.position, self.template = rows, position, template
        self.combine = combine  # a Combiner: takes each row as it arrives
        self.storage_options, self.bar, self.failed = storage_options, bar, 0
        self.take = take  # Icechunk: writes the row's tree into the repository, completes the row
        for i, r in enumerate(rows):
            if r is not None:
                self.check(r)
                if combine is not None:
                    combine.add(r, i)

    def check(self, r: FileResult) -> None:
        if self.template is None or r.status == "failed":
            return
        from ..read import check

        try:
            r.check = check(self.template, r.index, storage_options=self.storage_options).as_dict()
        except RefindexError as e:
            r.check = {"ok": False, "differences": [{"path": "/", "message": " ".join(str(e).split())}]}

    def __call__(self, row: dict[str, Any]) -> None:
        tree = row.pop("tree", None)
        if self.take is not None and tree is not None and row["status"] == "indexed":
            row = self.take(row, tree)
        result = FileResult(**row)
        self.check(result)
        self.rows[self.position[row["source"]]] = result
        if self.combine is not None:
            self.combine.add(result, self.position[row["source"]])
        self.failed += row["status"] == "failed"
        if self.bar is not None:
            self.bar.set_postfix(failed=self.failed, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.combine is not None:
            self.combine.close()  # also when interrupted: no reader thread outlives the batch


def _progress(total: int, skipped: int, enabled: ProgressSetting) -> Any:
    """Files done (failed ones in the postfix): a notebook widget, a terminal bar, or plain lines in a log."""
    if total == 0:
        return None
    return progress_bar(total, desc=f"refindex batch ({skipped} up to date)", unit="file", setting=enabled,
                        smoothing=0.1)
