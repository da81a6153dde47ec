"""The work for one input: scan it, write its index where the batch wants it, return its manifest row.

It runs wherever the batch sends it (this process, a local worker process, a Dask
worker) and never raises: a failure is a row.  Remote outputs are written to a local
temporary file or folder first and then uploaded: a JSON index as one PUT (object stores
never show half an object), a parquet folder record files first and ``.zmetadata`` last.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from .. import urls
from ..errors import RefindexError
from ..options import ScanOptions
from ..pipeline import icechunk_tree, write_index
from ..formats import ZMETADATA, output_error
from ._inputs import Format
from ._manifest import now_text
from ._results import FileResult

UPLOADS = 8  # remote indexes of a group being put in place at once (while its next files are scanned)


@dataclass(slots=True)
class Task:
    """One input of a batch: where its index goes and how it is made (slots: a batch plans one per input)."""

    source: str
    index: str
    format: Format
    options: ScanOptions
    record_size: int | None = None
    fingerprint: str | None = None
    isolate: bool = False  # in a fresh subprocess (crash / hang protection on Dask workers)
    timeout: float | None = None
    group: str | None = None  # icechunk: the file's group (the coordinator writes it; see _icechunk)


def index_one(task: Task) -> dict[str, Any]:
    """Scan ``task.source`` and write its index to ``task.index``; returns a manifest row (never raises)."""
    t0 = time.perf_counter()
    if task.isolate:
        from ..isolation.worker import Worker
        from ..options import time_limit_of

        with Worker() as w:
            try:
                return w.run(index_one, {"task": replace(task, isolate=False)},
                             timeout=task.timeout or time_limit_of(task.source), label=task.source)
            except RefindexError as e:
                return failed_row(task, e, time.perf_counter() - t0)
    return _indexed(task, None, t0)[0]


def _indexed(task: Task, uploads: ThreadPoolExecutor | None, t0: float) -> tuple[dict[str, Any], Future | None]:
    """The row of ``task`` scanned and written here; ``uploads``: a remote index's upload is left to it,
    and its future returned (the row holds only when it succeeds, see :func:`_uploaded`)."""
    if task.format == "icechunk":
        return _scan_for_icechunk(task, t0), None
    try:
        summary, upload = _write(task, uploads)
    except Exception as e:  # noqa: BLE001 - one bad file must never stop the batch
        return failed_row(task, e, time.perf_counter() - t0), None
    prov = summary.get("source") or {}
    return FileResult(source=task.source, index=task.index, status="indexed", size=prov.get("size"),
                      etag=prov.get("etag"), mtime=prov.get("mtime"), version=prov.get("version"),
                      seconds=round(time.perf_counter() - t0, 4), options=task.fingerprint, finished=now_text(),
                      keys=summary.get("keys") if task.format == "json" else None, arrays=summary.get("arrays"),
                      chunks=summary.get("chunks_referenced"), inline_chunks=summary.get("inline_chunks"),
                      index_bytes=summary.get("bytes")).as_dict(), upload


def _uploaded(task: Task, row: dict[str, Any], upload: Future | None) -> dict[str, Any]:
    """``row``, or the failed row of a file whose index could not be put in place."""
    if upload is None:
        return row
    try:
        upload.result()
    except Exception as e:  # noqa: BLE001 - that file's row, never the batch
        return failed_row(task, e, float(row.get("seconds") or 0.0))
    return row


def index_group(tasks: list[Task], mark: str | None = None) -> list[dict[str, Any]]:
    """Several remote inputs (:func:`group_tasks`): the first round trip of every scan (info, head and
    tail) asked at once, then the scans one after another, each taking its answer instead of waiting
    for its own.  Latency-bound work then does not hold a process: a worker waits one round trip per
    group, not one per file, and libhdf5 (serialised under h5py's lock) only ever parses.
    Returns the rows in the order of ``tasks``; never raises (a failure is that file's row).

    Isolated tasks (Dask with ``isolate``) run as one group in one subprocess; when it crashes or
    overruns the time limit of its slowest file, each of its files is run again alone, so only the
    culprit becomes a failed row.  ``mark``: a file where the position of the file being scanned and
    when it started are noted (:func:`marked`), so a worker that dies names its culprit at once."""
    if not tasks:
        return []
    if tasks[0].isolate:
        from ..isolation.worker import Worker

        with Worker() as w:
            try:
                return w.run(index_group, {"tasks": [replace(t, isolate=False) for t in tasks]},
                             timeout=group_time_limit(tasks), label=f"{len(tasks)} files from {tasks[0].source}")
            except RefindexError:
                return [index_one(t) for t in tasks]  # each in a subprocess of its own
    from ..source import scan_ahead

    drops = [scan_ahead(t.source, t.options.storage_options, t.options.fetch) for t in tasks]
    try:
        done: list[tuple[dict[str, Any], Future | None]] = []
        # A remote index's upload (a round trip) overlaps the next files' scans instead of following each.
        with ThreadPoolExecutor(UPLOADS, thread_name_prefix="refindex-upload") as uploads:
            for i, t in enumerate(tasks):
                if mark is not None:
                    with open(mark, "w") as fh:
                        fh.write(f"{i} {time.time()}")
                done.append(_indexed(t, uploads, time.perf_counter()))
        return [_uploaded(t, row, upload) for t, (row, upload) in zip(tasks, done)]
    finally:
        for drop in drops:
            if drop is not None:
                drop()  # what a failed scan never took


def group_tasks(tasks: list[Task], workers: int, in_flight: int = 1) -> list[list[Task]]:
    """Tasks in groups for :func:`index_group`: remote inputs up to ``in_flight`` at a time (fewer when
    that leaves a worker without a group), local ones alone (nothing to wait for; a crash loses no other file)."""
    alone = [t for t in tasks if urls.is_local(t.source) or t.format == "icechunk"]
    remote = [t for t in tasks if not (urls.is_local(t.source) or t.format == "icechunk")]
    size = max(1, min(int(in_flight), -(-len(remote) // max(1, workers))))
    return [remote[i:i + size] for i in range(0, len(remote), size)] + [[t] for t in alone]


def marked(mark: str) -> tuple[int, float] | None:
    """(position, seconds it has run) of the file a group was scanning, from its ``mark``; None before the first."""
    try:
        with open(mark) as fh:
            at, started = fh.read().split()
        return int(at), time.time() - float(started)
    except (OSError, ValueError):
        return None


def group_time_limit(tasks: list[Task], timeout: float | None = None) -> float:
    """A group's time limit: its slowest file's, and a quarter more for the worker's start and the group's
    first round trip, so a file that hangs has run past its own limit when the group is stopped."""
    from ..options import time_limit_of

    return 1.25 * max(timeout or t.timeout or time_limit_of(t.source) for t in tasks)


def _scan_for_icechunk(task: Task, t0: float) -> dict[str, Any]:
    """An Icechunk batch's work on a worker: the prepared v3 Tree (under ``"tree"``) beside the row;
    the coordinator writes it into the repository and completes the row."""
    try:
        tree = icechunk_tree(task.source, task.options)
    except Exception as e:  # noqa: BLE001 - one bad file must never stop the batch
        return failed_row(task, e, time.perf_counter() - t0)
    prov = tree.provenance.get("source") or {}
    return {**FileResult(source=task.source, index=task.index, status="indexed", size=prov.get("size"),
                         etag=prov.get("etag"), mtime=prov.get("mtime"), version=prov.get("version"),
                         seconds=round(time.perf_counter() - t0, 4), options=task.fingerprint, finished=now_text(),
                         arrays=len(tree.arrays), group=task.group).as_dict(), "tree": tree}


def _write(task: Task, uploads: ThreadPoolExecutor | None = None) -> tuple[dict[str, Any], Future | None]:
    protocol, path = urls.split(task.index)
    if protocol == "file":
        return dict(write_index(task.source, path, task.options, format=task.format,
                                record_size=task.record_size)), None
    done, upload = written_then_put(task.index, task.options.storage_options, task.format == "parquet",
                                    lambda local: write_index(task.source, local, task.options, format=task.format,
                                                              record_size=task.record_size), uploads)
    return dict(done), upload


def written_then_put(index: str, storage_options: dict[str, Any] | None, folder: bool, write: Any,
                     uploads: ThreadPoolExecutor | None = None) -> tuple[Any, Future | None]:
    """``write(local)`` of an index into a temporary place, then put at the remote ``index``: a JSON file
    in one PUT (the object appears whole or not at all), a parquet folder by :func:`put_folder`.
    Returns what ``write`` returned, and the upload's future when ``uploads`` runs it (else it is done);
    a failed upload is an error naming ``index``."""
    tmp = tempfile.mkdtemp(prefix="refindex-batch-")
    local = os.path.join(tmp, "index" + (".refs.parq" if folder else ".refs.json"))
    try:
        done = write(local)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    def put() -> None:
        try:
            fs, remote = urls.filesystem(index, storage_options)
            if folder:
                put_folder(fs, local, remote)
            else:
                fs.put_file(local, remote)
        except Exception as e:
            raise output_error(e, index) from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    if uploads is None:
        put()
        return done, None
    return done, uploads.submit(put)


def put_folder(fs: Any, local_dir: str, base: str) -> None:
    """Upload a parquet index folder: records first, ``.zmetadata`` last, stale records removed."""
    base = base.rstrip("/")
    wanted: set[str] = set()
    last = None
    for folder, _, names in os.walk(local_dir):
        for name in sorted(names):
            local = os.path.join(folder, name)
            remote = base + "/" + os.path.relpath(local, local_dir).replace(os.sep, "/")
            wanted.add(remote)
            if name == ZMETADATA and folder == local_dir:
                last = (local, remote)
                continue
            fs.put_file(local, remote)
    if last is not None:
        fs.put_file(*last)
    try:
        old = set(fs.find(base))
    except FileNotFoundError:
        old = set()
    stale = sorted(p for p in old if p not in wanted)
    if stale:
        fs.rm(stale)


def failed_row(task: Task, e: BaseException, seconds: float) -> dict[str, Any]:
    """The manifest row of an input that could not be indexed, saying why."""
    if isinstance(e, RefindexError):
        text = " ".join(str(e).split())
    else:  # not a RefindexError: a refindex bug or an environment problem, say which
        text = f"internal error: {type(e).__name__}: {' '.join(str(e).split())}"
    return FileResult(source=task.source, index=task.index, status="failed", seconds=round(seconds, 4), error=text,
                      options=task.fingerprint, finished=now_text(), group=task.group).as_dict()
