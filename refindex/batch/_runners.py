"""Where a batch's tasks run: this process, local worker processes, or a Dask cluster.

Local workers are :class:`refindex.isolate.Worker` processes fed one file at a time: a
file that crashes libhdf5 or hangs past the time limit kills only its worker, the file
is recorded as failed and a fresh worker takes the next one.  On Dask only the task (URLs
and options) and the result row travel; each worker reads its source and writes its
index itself, so it needs access to both.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from ..errors import RefindexError
from ..isolate import Worker
from ..options import time_limit_of
from ._task import Task, failed_row, index_one

OnResult = Callable[[dict[str, Any]], None]


def run_inline(tasks: list[Task], on_result: OnResult) -> None:
    for t in tasks:
        on_result(index_one(t))


def run_local(tasks: list[Task], workers: int, timeout: float | None, on_result: OnResult) -> None:
    """``workers`` threads, each driving one isolated worker process, one file at a time."""
    pool: queue.SimpleQueue[Worker] = queue.SimpleQueue()
    all_workers = [Worker() for _ in range(workers)]
    for w in all_workers:
        pool.put(w)

    def run(task: Task) -> dict[str, Any]:
        w = pool.get()
        t0 = time.perf_counter()
        try:
            return w.run(index_one, {"task": task}, timeout=timeout or time_limit_of(task.source), label=task.source)
        except RefindexError as e:  # crashed or timed out: the worker restarts on its next job
            return failed_row(task, e, time.perf_counter() - t0)
        finally:
            pool.put(w)

    ex = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="refindex-batch")
    futures = [ex.submit(run, t) for t in tasks]
    try:
        for fut in as_completed(futures):
            on_result(fut.result())
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


def run_dask(tasks: list[Task], dask: Any, workers: int, on_result: OnResult) -> None:
    from distributed import as_completed as dask_completed

    client, cluster = _dask_client(dask, workers)
    try:
        futures = {client.submit(index_one, t, pure=False, key=f"refindex-index-{uuid.uuid4().hex}"): t
                   for t in tasks}
        for fut in dask_completed(list(futures)):
            t = futures[fut]
            try:
                on_result(fut.result())
            except Exception as e:  # noqa: BLE001 - e.g. KilledWorker after a worker crash
                on_result(failed_row(t, RefindexError(f"Dask task failed: {type(e).__name__}: {e}", file=t.source),
                                     0.0))
            fut.release()
    finally:
        if client is not dask:  # a client made here (from an address or "local"): closed here
            client.close()
        if cluster is not None:
            cluster.close()
