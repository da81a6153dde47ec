"""What ``run_batch`` does: inputs planned against the manifest, tasks run (inline, local
workers or Dask), results collected into the manifest, an Icechunk commit or a combined index
(the package's docstring tells the whole)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any, Unpack

from .. import urls
from ..errors import RefindexError
from ..feedback.progress import ProgressSetting, progress_bar
from ..formats import for_zarr
from ..formats.icechunk import IcechunkTarget
from ..options import ScanKeywords, ScanOptions, options_from
from ._combine import Combiner
from ._icechunk import IcechunkBatch, assign_groups, not_committed, plan_groups
from ._inputs import MANIFEST_NAME, SUFFIX, Format, common_root, expand_inputs
from ._manifest import Plan, current_infos, options_fingerprint, plan_inputs, read_manifest, write_manifest
from ._results import BatchReport, FileResult
from ._runners import run_dask, run_inline, run_local, start_workers
from ._task import Task


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
    planned = plan_inputs(sources, known, previous, format, out, root, fingerprint, force, storage_options)
    rows, isolated = planned.rows, isolate and (dask is not None or n_workers <= 0)  # local workers are anyway
    tasks_of = partial(_tasks_of, fmt=format, options=scan_options, record_size=record_size,
                       fingerprint=fingerprint, isolated=isolated, timeout=timeout)
    collect = _Collector(rows, {job[1]: job for job in planned.jobs}, template, storage_options,
                         _progress(len(planned.jobs), None, progress), combine=combiner)
    try:
        _scan(planned, collect, tasks_of, dask, n_workers, timeout, in_flight, started, progress)
    finally:  # also on interruption: what finished is recorded, an input not done keeps its previous row
        collect.close()
        unsaved = save_manifest([r if r is not None else previous.get(src) for r, src in zip(rows, sources)],
                                manifest_url, storage_options)
    report = BatchReport(results=[r for r in rows if r is not None], manifest=None if unsaved else manifest_url,
                         seconds=time.perf_counter() - t0, manifest_error=unsaved)
    return report if combiner is None else combiner.finish_into(report)


def _tasks_of(jobs: list[tuple[int, str, str]], *, fmt: str, options: ScanOptions, record_size: int | None,
              fingerprint: str, isolated: bool, timeout: float | None) -> list[Task]:
    return [Task(src, idx, fmt, options, record_size, fingerprint, isolated, timeout) for _, src, idx in jobs]


def _scan(planned: Plan, collect: "_Collector", tasks_of: Callable[[list[tuple[int, str, str]]], list[Task]],
          dask: Any, n_workers: int, timeout: float | None, in_flight: int, started: list[Any],
          progress: ProgressSetting) -> None:
    """The jobs run, and the inputs the store must be asked about settled: at the same time on local
    workers (the inputs that cannot be up to date are scanned while the others' sources are asked, a
    listing page per 1,000 objects or a HEAD each; a changed one found that way is scanned after them),
    first on Dask (one submission of every job to the cluster)."""
    if dask is not None:
        collect.settle(*planned.settle(), progress)
        _run(tasks_of(sorted(collect.jobs.values())), dask, n_workers, timeout, collect, in_flight, started)
        return
    settling = _background(lambda: collect.settle(*planned.settle(), progress))
    _run(tasks_of(planned.jobs), dask, n_workers, timeout, collect, in_flight, started)
    _run(tasks_of(settling.result()), dask, n_workers, timeout, collect, in_flight)


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
        if not for_zarr(scan_options.zarr_format).combinable:
            raise RefindexError("--combine needs zarr v2 indexes of the files (--zarr-format 2)")
        target = _icechunk_target(combine, branch, repository_options, storage_options)
        return Combiner(target.repo, concat_dims=concat_dims, mode=mode, storage_options=storage_options,
                        icechunk=target)
    if format != "json":
        raise RefindexError("--combine needs JSON indexes of the files (format='json'); the combined index "
                            "itself is parquet unless its name ends in .json")
    if not for_zarr(scan_options.zarr_format).combinable:
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
    collect = _Collector(rows, {job[1]: job for job in jobs}, None, target.source_options,
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


def save_manifest(rows: list[FileResult | dict[str, Any] | None], url: str, storage_options: dict[str, Any] | None
                  ) -> str | None:
    """Write the manifest (a row is a result, or a previous run's row kept as it was); None, or why it could
    not be written (the rows stay in the report either way)."""
    try:
        write_manifest((r if isinstance(r, dict) else r.as_dict() for r in rows if r is not None), url,
                       storage_options)
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
    from ..formats.icechunk import declared_containers

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
    """Takes each finished row: checks it against the template, puts it in place, moves the bar.

    A batch keeps every row to the end (the manifest, the report): a row's strings are the plan's own
    objects (its source and index) or shared with the rows before it (options, time finished), not the
    copies each row arrives with from its worker.  Rows come from the thread that runs the jobs and,
    once the store has been asked about the other inputs, from the thread that asked (:meth:`settle`):
    one at a time."""

    def __init__(self, rows: list[FileResult | None], jobs: dict[str, tuple[int, str, str]], template: Any,
                 storage_options: dict[str, Any] | None, bar: Any, take: Any = None, combine: Any = None):
        self.rows, self.jobs, self.template = rows, jobs, template  # jobs: source -> (position, source, index)
        self.lock = threading.Lock()
        self.closed = False
        self.texts: dict[str, str] = {}
        self.combine = combine  # a Combiner: takes each row as it arrives
        self.storage_options, self.bar, self.failed = storage_options, bar, 0
        self.take = take  # Icechunk: writes the row's tree into the repository, completes the row
        self.join([(i, r) for i, r in enumerate(rows) if r is not None])

    def check(self, r: FileResult) -> None:
        if self.template is None or r.status == "failed":
            return
        from ..read import check

        try:
            r.check = check(self.template, r.index, storage_options=self.storage_options).as_dict()
        except RefindexError as e:
            r.check = {"ok": False, "differences": [{"path": "/", "message": " ".join(str(e).split())}]}

    def join(self, rows: list[tuple[int, FileResult]]) -> None:
        """Rows finished without a job (up to date, or failed to stat) put in place, checked, and combined
        (the saved state told which of their indexes are still the ones it read)."""
        if self.combine is not None:
            self.combine.see_indexes([r for _, r in rows])
        for i, r in rows:
            self.rows[i] = r
            self.check(r)
            if self.combine is not None:
                self.combine.add(r, i)

    def settle(self, rows: list[tuple[int, FileResult]], jobs: list[tuple[int, str, str]],
               progress: ProgressSetting) -> list[tuple[int, str, str]]:
        """The inputs the store was asked about: ``rows`` (up to date, or failed to stat) join the others,
        ``jobs`` (changed) are expected from now on and counted on the bar; returns ``jobs``."""
        with self.lock:
            if self.closed:  # the batch ended first (interrupted): nothing more is taken
                return []
            self.join(rows)
            for job in jobs:
                self.jobs[job[1]] = job
            up_to_date = sum(r.status == "up_to_date" for _, r in rows)
            if self.bar is None and jobs:
                self.bar = _progress(len(jobs), up_to_date, progress)
            elif self.bar is not None:
                self.bar.total = (self.bar.total or 0) + len(jobs)
                self.bar.desc = _description(up_to_date)
            return jobs

    def __call__(self, row: dict[str, Any]) -> None:
        with self.lock:
            self.take_row(row)

    def take_row(self, row: dict[str, Any]) -> None:
        tree = row.pop("tree", None)
        if self.take is not None and tree is not None and row["status"] == "indexed":
            row = self.take(row, tree)
        position, source, where = self.jobs[row["source"]]
        result = FileResult(**self.shared(row, source, where))
        self.check(result)
        self.rows[position] = result
        if self.combine is not None:
            self.combine.add(result, position)
        self.failed += row["status"] == "failed"
        if self.bar is not None:
            self.bar.set_postfix(failed=self.failed, refresh=False)
            self.bar.update(1)

    def shared(self, row: dict[str, Any], source: str, where: str) -> dict[str, Any]:
        """``row`` with its strings replaced by equal ones already held (see the class docstring)."""
        row["source"] = source
        for key in ("index", "group"):
            if row.get(key) == where:
                row[key] = where
        if len(self.texts) > 1024:  # times of the last few seconds are what repeats
            self.texts.clear()
        for key in ("options", "finished"):
            if isinstance(row.get(key), str):
                row[key] = self.texts.setdefault(row[key], row[key])
        return row

    def close(self) -> None:
        with self.lock:
            self.closed = True
            if self.bar is not None:
                self.bar.close()
            if self.combine is not None:
                self.combine.close()  # also when interrupted: no reader thread outlives the batch


def _background(job: Callable[[], Any]) -> "Future[Any]":
    """``job()`` in a thread of its own, its result or exception in the future (a daemon: an interrupted
    batch does not wait for it)."""
    done: Future[Any] = Future()

    def run() -> None:
        try:
            done.set_result(job())
        except BaseException as e:  # noqa: BLE001 - handed to whoever asks for the result
            done.set_exception(e)

    threading.Thread(target=run, name="refindex-batch-settle", daemon=True).start()
    return done


def _description(skipped: int | None) -> str:
    return "refindex batch" if skipped is None else f"refindex batch ({skipped} up to date)"


def _progress(total: int, skipped: int | None, enabled: ProgressSetting) -> Any:
    """Files done (failed ones in the postfix): a notebook widget, a terminal bar, or plain lines in a log."""
    if total == 0:
        return None
    return progress_bar(total, desc=_description(skipped), unit="file", setting=enabled, smoothing=0.1)
