"""Where a batch's tasks run: this process, local worker processes, or a Dask cluster.

Local workers are :class:`refindex.isolation.worker.Worker` processes, fed remote files a group at a
time (their first round trips asked together, :func:`~refindex.batch._task.index_group`) and
local ones one at a time: a file that crashes libhdf5 or hangs past the time limit kills only
its worker, the file is recorded as failed (its group's other files run again, alone) and a
fresh worker takes the next job.  On Dask only the task (URLs
and options) and the result row travel; each worker reads its source and writes its
index itself, so it needs access to both.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from ..errors import RefindexError, WorkerCrashed, WorkerTimeout
from ..isolation.worker import Worker
from ..options import time_limit_of
from ._task import Task, failed_row, group_tasks, group_time_limit, index_group, index_one, marked

OnResult = Callable[[dict[str, Any]], None]
WINDOW = 8  # groups submitted per local worker (per Dask thread) at a time (the next one is always waiting for it)
DASK_RECOUNT = 5.0  # seconds between asking the Dask scheduler how many threads its workers have


def run_inline(tasks: list[Task], on_result: OnResult, in_flight: int = 1) -> None:
    for group in group_tasks(tasks, 1, in_flight):
        for row in index_group(group):
            on_result(row)


def start_workers(count: int) -> list[Worker]:
    """``count`` worker processes started now (see :meth:`Worker.start`), for :func:`run_local`."""
    return [Worker().start() for _ in range(max(0, count))]


def run_local(tasks: list[Task], workers: int, timeout: float | None, on_result: OnResult,
              in_flight: int = 1, started: list[Worker] | None = None) -> None:
    """``workers`` threads, each driving one isolated worker process, a group of files at a time
    (:func:`group_tasks`: remote files several at once, their round trips overlapped; local ones alone);
    ``started``: workers already started (:func:`start_workers`), used first.

    A group whose worker crashes, or overruns while one file has run past its own limit, makes that
    file (the group notes which it scans, :func:`~refindex.batch._task.marked`) a failed row; the
    files before it run again alone (their rows died with the worker), those after it as a group."""
    pool: queue.SimpleQueue[Worker] = queue.SimpleQueue()
    groups = group_tasks(tasks, workers, in_flight)
    n = min(workers, len(groups))
    started = list(started or [])
    for w in started[n:]:  # more than the groups need
        threading.Thread(target=w.close, daemon=True).start()
    all_workers = started[:n] + [Worker() for _ in range(n - len(started[:n]))]
    for w in all_workers:
        pool.put(w)

    def alone(w: Worker, task: Task) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            return w.run(index_one, {"task": task}, timeout=timeout or time_limit_of(task.source), label=task.source)
        except RefindexError as e:  # crashed or timed out: the worker restarts on its next job
            return failed_row(task, e, time.perf_counter() - t0)

    def run(group: list[Task]) -> list[dict[str, Any]]:
        w = pool.get()
        try:
            return run_group(w, group)
        finally:
            pool.put(w)

    def run_group(w: Worker, group: list[Task]) -> list[dict[str, Any]]:
        if len(group) <= 1:
            return [alone(w, t) for t in group]
        fd, mark = tempfile.mkstemp(prefix="refindex-group-")
        os.close(fd)
        try:
            return w.run(index_group, {"tasks": group, "mark": mark}, timeout=group_time_limit(group, timeout),
                         label=f"{len(group)} files from {group[0].source}")
        except RefindexError as e:  # a file crashed libhdf5 or hung: the mark says which
            failure, at = e, marked(mark)
        finally:
            os.unlink(mark)
        if at is None or not isinstance(failure, (WorkerCrashed, WorkerTimeout)):
            return [alone(w, t) for t in group]  # before any scan, or not the worker's death: each file alone
        i, ran = at
        culprit = group[i]
        before = [alone(w, t) for t in group[:i]]  # their rows died with the worker
        if isinstance(failure, WorkerTimeout) and ran < (timeout or time_limit_of(culprit.source)):
            row = alone(w, culprit)  # a slow group, not yet a file past its own limit: alone, it tells
        else:
            row = failed_row(culprit, type(failure)(failure.reason, file=culprit.source), ran)
        return before + [row] + run_group(w, group[i + 1:])

    ex = ThreadPoolExecutor(max_workers=len(all_workers), thread_name_prefix="refindex-batch")
    waiting = iter(groups)
    futures: set[Future] = set()
    try:
        while True:
            # A window of groups submitted, not every one: a future and a work item per local file
            # (10^5 of them) held from the start grow this process with the archive.
            for g in itertools.islice(waiting, max(0, WINDOW * len(all_workers) - len(futures))):
                futures.add(ex.submit(run, g))
            if not futures:
                break
            done, futures = wait(futures, return_when=FIRST_COMPLETED)
            for fut in done:  # its rows are let go once taken
                for row in fut.result():
                    on_result(row)
    finally:
        for f in futures:
            f.cancel()
        ex.shutdown(wait=False, cancel_futures=True)
        for w in all_workers:
            threading.Thread(target=w.close, daemon=True).start()  # running jobs end with their pipe


def _dask_client(dask: Any, workers: int):
    try:
        from distributed import Client, LocalCluster
    except ImportError as e:
        raise RefindexError("dask.distributed is not installed (pip install 'refindex[dask]')") from e
    if isinstance(dask, str):
        if dask == "local":
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None)
            return Client(cluster), cluster
        try:
            return Client(dask, timeout="30s"), None
        except Exception as e:
            raise RefindexError(f"cannot connect to the Dask scheduler: {e}", file=dask) from e
    return dask, None  # the caller's Client (or anything with submit/as_completed semantics): theirs to close


def _submit(client: Any, job: Any, arg: Any) -> Any:
    return client.submit(job, arg, pure=False, key=f"refindex-index-{uuid.uuid4().hex}")


def _dask_window(client: Any, workers: int) -> int:
    """Groups a Dask batch keeps submitted: :data:`WINDOW` per thread of the cluster (a thread runs one
    group at a time, as a local worker does); per ``workers`` while the cluster has none yet."""
    try:
        threads = sum(client.nthreads().values())
    except Exception:  # noqa: BLE001 - a Client-like object without nthreads(): the caller's count
        threads = 0
    return WINDOW * (threads or max(1, workers))


def _dask_jobs(retry: deque[Task], waiting: Iterator[list[Task]], room: int) -> list[list[Task]]:
    """Up to ``room`` groups to submit (each returns its rows): a failed group's files first, each alone."""
    jobs = [[retry.popleft()] for _ in range(min(room, len(retry)))]
    return jobs + list(itertools.islice(waiting, max(0, room - len(jobs))))


def run_dask(tasks: list[Task], dask: Any, workers: int, on_result: OnResult, in_flight: int = 1) -> None:
    """The groups on a Dask cluster, a window of them submitted at a time (:func:`_dask_window`, recounted
    every :data:`DASK_RECOUNT` s as the cluster may scale) and topped up as each completes: a future per
    group held from the start grows this process with the archive.  A group that fails (e.g. KilledWorker
    after a crash) has its files run again, each alone; a single file that fails is its failed row."""
    from distributed import as_completed as dask_completed

    client, cluster = _dask_client(dask, workers)
    waiting, retry = iter(group_tasks(tasks, workers, in_flight)), deque[Task]()
    futures: dict[Any, list[Task]] = {}
    done = dask_completed()
    try:
        window, counted = _dask_window(client, workers), time.monotonic()
        while True:
            if time.monotonic() - counted > DASK_RECOUNT:
                window, counted = _dask_window(client, workers), time.monotonic()
            for group in _dask_jobs(retry, waiting, window - len(futures)):
                fut = _submit(client, index_group, group)
                futures[fut] = group
                done.add(fut)
            if not futures:
                break
            fut = next(done)
            group = futures.pop(fut)
            try:
                rows = fut.result()
            except Exception as e:  # noqa: BLE001 - e.g. KilledWorker after a worker crash
                if len(group) > 1:  # which file killed it? each again alone
                    retry.extend(group)
                    fut.release()
                    continue
                t = group[0]
                rows = [failed_row(t, RefindexError(f"Dask task failed: {type(e).__name__}: {e}", file=t.source),
                                   0.0)]
            for row in rows:
                on_result(row)
            fut.release()
    finally:
        if futures:  # interrupted: the cluster stops what is left
            with contextlib.suppress(Exception):
                client.cancel(list(futures))
        if client is not dask:  # a client made here (from an address or "local"): closed here
            client.close()
        if cluster is not None:
            cluster.close()
