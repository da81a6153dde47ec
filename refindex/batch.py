"""Index many HDF5/NWB files at once: ``refindex batch`` and :func:`run_batch`.

Archives hold thousands of files; operators index them once and publish each index
next to its data.  ``run_batch`` does that resumably, in parallel, and without letting
one bad file stop the rest.

Inputs
    A list of local paths / fsspec URLs, globs (``data/**/*.nwb``,
    ``s3://bucket/prefix/**/*.nwb``), and text files of URLs (``@urls.txt``, or any
    input ending in ``.txt``: one URL per line, ``#`` comments).  Index files and
    manifests matched by a glob are left out.

Outputs
    One index per input: ``<input>.refs.json`` (``format="json"``) or the folder
    ``<input>.refs.parq`` (``format="parquet"``), written next to the input, or under
    ``output`` (a local folder or ``s3://`` prefix) mirroring the input tree below the
    inputs' common folder.  Every index appears atomically: local files are written to a
    temporary name and renamed; objects are written with a single PUT (object stores
    never show half an object); a remote parquet folder gets its record files first and
    its ``.zmetadata`` last, so readers never see a half-written index.

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
    :class:`refindex.isolate.Worker` fed one file at a time.  A file that crashes
    libhdf5 (segfault) or hangs past ``timeout`` seconds kills only its worker: that
    file is recorded as failed ("libhdf5 crashed (signal 11 ...)" / "timed out") and a
    fresh worker takes the next file.  ``workers=0`` runs in this process (debugging).
    Dask: ``dask="tcp://scheduler:8786"``, ``dask="local"`` (a LocalCluster of
    ``workers`` processes) or a ``distributed.Client`` runs the same task
    (:func:`index_one`) on the cluster; only URLs and small result rows travel, each
    worker reads its source and writes its index itself (so workers need access to
    both, and the output must be storage they all see: an object store or a shared
    disk).  With dask, ``isolate=True`` additionally runs each scan in a subprocess.
    A tqdm progress bar shows files done/failed, files per second and the ETA.

Combining (``combine=PATH``)
    For netCDF-style datasets split across files (one logical array, cut along a
    dimension such as time), the per-file JSON indexes are merged into one with
    kerchunk's ``MultiZarrToZarr`` (``concat_dims``, default ``["time"]``;
    ``identical_dims`` for coordinates shared by all files).  Limits: JSON indexes only;
    every input must have been indexed (one failure refuses the combine); arrays need
    ``_ARRAY_DIMENSIONS`` (netCDF4 / h5netcdf files have them, NWB files do not);
    chunking must agree across files (kerchunk cannot merge differently chunked
    pieces) and the combined index is a plain kerchunk index without refindex
    provenance.  Checked with kerchunk 0.2.10 on zarr 3.4: it works; it runs in a
    worker process under ``timeout``, so a kerchunk failure or hang becomes a clear
    :class:`~refindex.errors.RefindexError` instead of a stuck batch.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import posixpath
import queue
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import fsspec

from .errors import RefindexError

Format = Literal["json", "parquet"]
Status = Literal["indexed", "up_to_date", "failed"]

SUFFIX = {"json": ".refs.json", "parquet": ".refs.parq"}
MANIFEST_NAME = "refindex-manifest.jsonl"
_GLOB_CHARS = "*?["
_NOT_OPTIONS = ("storage_options", "stats", "sink", "isolate", "timeout")


# ------------------------------------------------------------------ results
@dataclass
class FileResult:
    """One manifest row: what happened to one input."""

    source: str
    index: str
    status: Status
    size: int | None = None
    etag: str | None = None
    mtime: float | str | None = None
    keys: int | None = None
    arrays: int | None = None
    chunks: int | None = None
    inline_chunks: int | None = None
    index_bytes: int | None = None
    seconds: float | None = None
    error: str | None = None
    options: str | None = None
    finished: str | None = None
    check: dict[str, Any] | None = None  # schema check against a template: {"ok", "differences"}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BatchReport:
    """What a batch did; ``results`` follow the order of the inputs."""

    results: list[FileResult]
    manifest: str | None
    seconds: float
    combined: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def _with(self, status: str) -> list[FileResult]:
        return [r for r in self.results if r.status == status]

    @property
    def indexed(self) -> list[FileResult]:
        return self._with("indexed")

    @property
    def up_to_date(self) -> list[FileResult]:
        return self._with("up_to_date")

    @property
    def failed(self) -> list[FileResult]:
        return self._with("failed")

    @property
    def check_failed(self) -> list[FileResult]:
        """Indexes that do not follow the batch's ``check`` template."""
        return [r for r in self.results if r.check is not None and not r.check.get("ok")]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.check_failed

    def summary(self) -> str:
        rate = len(self.indexed) / self.seconds if self.seconds > 0 else 0.0
        return (f"{len(self.results)} inputs: {len(self.indexed)} indexed, {len(self.up_to_date)} up to date, "
                f"{len(self.failed)} failed"
                + (f", {len(self.check_failed)} not following the template" if self.check_failed else "")
                + f" in {self.seconds:.1f} s ({rate:.1f} files/s)"
                + (f"; manifest {self.manifest}" if self.manifest else ""))


# ------------------------------------------------------------------ URLs
def _split(url: str) -> tuple[str, str]:
    """(protocol, path without protocol); local paths made absolute."""
    protocol, path = fsspec.core.split_protocol(url)
    if protocol in (None, "file", "local"):
        return "file", os.path.abspath(path)
    return protocol, path


def _join(protocol: str, path: str) -> str:
    return path if protocol == "file" else f"{protocol}://{path}"


def _normal(url: str) -> str:
    return _join(*_split(url))


def _fs(url: str, storage_options: dict[str, Any] | None):
    """(filesystem, path) for ``url``; storage options apply to remote URLs only."""
    protocol, path = _split(url)
    if protocol == "file":
        return fsspec.filesystem("file"), path
    fs, p = fsspec.core.url_to_fs(url, **(storage_options or {}))
    return fs, p


def _is_ours(path: str) -> bool:
    """Files a glob must not feed back in: indexes and manifests."""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    return (base.endswith((".refs.json", ".refs.parq")) or ".refs.parq/" in path or base.startswith("refindex-manifest")
            or base.startswith(".refindex-"))


def _read_list(url: str, storage_options: dict[str, Any] | None) -> list[str]:
    fs, path = _fs(url, storage_options)
    try:
        text = fs.cat_file(path).decode("utf-8")
    except FileNotFoundError as e:
        raise RefindexError("list of inputs not found", file=url) from e
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def expand_inputs(inputs: str | os.PathLike | Iterable[str | os.PathLike],
                  storage_options: dict[str, Any] | None = None) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Input URLs in order (duplicates dropped), plus stat info listings already gave us."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    urls: list[str] = []
    known: dict[str, dict[str, Any]] = {}
    for item in inputs:
        item = os.fspath(item)
        if item.startswith("@") or (item.endswith(".txt") and not any(c in item for c in _GLOB_CHARS)):
            urls.extend(_normal(u) for u in _read_list(item.removeprefix("@"), storage_options))
        elif any(c in item for c in _GLOB_CHARS):
            protocol, _ = _split(item)
            fs, pattern = _fs(item, storage_options)
            fs.invalidate_cache()  # listings of an earlier run in this process may be stale
            found = fs.glob(pattern, detail=True)
            for path in sorted(found):
                detail = found[path]
                if detail.get("type", "file") != "file" or _is_ours(path):
                    continue
                url = _join(protocol, path)
                urls.append(url)
                known[url] = detail
        else:
            urls.append(_normal(item))
    seen: set[str] = set()
    ordered = [u for u in urls if not (u in seen or seen.add(u))]
    return ordered, known


def common_root(urls: Sequence[str]) -> str:
    """The deepest folder holding every input (a URL for remote inputs)."""
    protocols = {_split(u)[0] for u in urls}
    paths = [_split(u)[1] for u in urls]
    if len(protocols) != 1:
        raise RefindexError("inputs mix local and remote files: pass output= and manifest= explicitly")
    protocol = protocols.pop()
    if protocol == "file":
        root = os.path.commonpath([os.path.dirname(p) for p in paths])
    else:
        root = posixpath.commonpath(["/" + posixpath.dirname(p) for p in paths]).lstrip("/")
    return _join(protocol, root)


def index_location(source: str, fmt: Format, output: str | None, root: str | None) -> str:
    """Where the index of ``source`` goes: beside it, or under ``output`` mirroring ``root``."""
    if output is None:
        return source + SUFFIX[fmt]
    rel = _split(source)[1][len(_split(root or "")[1]):].lstrip("/") if root else _split(source)[1].lstrip("/")
    out_protocol, out_path = _split(output)
    if out_protocol == "file":
        return os.path.join(out_path, *rel.split("/")) + SUFFIX[fmt]
    return _join(out_protocol, out_path.rstrip("/") + "/" + rel + SUFFIX[fmt])


def options_fingerprint(fmt: Format, scan_kwargs: dict[str, Any]) -> str:
    """Short hash of what shapes an index (format and scan keywords, never credentials)."""
    shown = {k: v for k, v in scan_kwargs.items() if k not in _NOT_OPTIONS}
    text = json.dumps({"format": fmt, **shown}, sort_keys=True, default=repr)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


# ------------------------------------------------------------------ freshness
def _normal_info(detail: dict[str, Any]) -> dict[str, Any]:
    """size / etag / mtime from an fsspec info or listing entry, as the index records them."""
    from .source import _file_info

    class _Listed:  # _file_info calls fs.info(path); answer with what we already have
        @staticmethod
        def info(_path: str) -> dict[str, Any]:
            return detail

    return _file_info(_Listed(), "")


def unchanged(recorded: dict[str, Any], now: dict[str, Any]) -> bool:
    """Same size, and same etag when both have one (else same mtime).

    The etag names the content; an object's mtime differs between listings and HEAD
    responses (millisecond vs second precision), so it only counts without an etag.
    """
    if recorded.get("size") is None or recorded.get("size") != now.get("size"):
        return False
    if recorded.get("etag") and now.get("etag"):
        return recorded["etag"] == now["etag"]
    # str(): a parquet manifest stores mtimes as text; str(float) round-trips exactly
    return recorded.get("mtime") is not None and str(recorded.get("mtime")) == str(now.get("mtime"))


def _index_provenance(index: str, fmt: Format, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``refs["refindex"]["source"]`` of an existing index, or None when there is none."""
    try:
        fs, path = _fs(index, storage_options)
        if fmt == "json":
            doc = json.loads(fs.cat_file(path))
        else:
            doc = json.loads(fs.cat_file(path.rstrip("/") + "/.zmetadata"))
        return (doc.get("refindex") or {}).get("source")
    except Exception:  # missing or unreadable: simply not up to date
        return None


def _index_exists(index: str, fmt: Format, storage_options: dict[str, Any] | None) -> bool:
    try:
        fs, path = _fs(index, storage_options)
        return bool(fs.exists(path.rstrip("/") + "/.zmetadata" if fmt == "parquet" else path))
    except Exception:
        return False


# ------------------------------------------------------------------ the task
def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _counts_json(refs: dict[str, Any]) -> dict[str, int]:
    """Manifest counts of an index dict, from :func:`refindex.info`'s summary."""
    from .api import info

    s = info(refs)
    return {"keys": len(refs.get("refs", {})), "arrays": s["arrays"], "chunks": s["chunks_referenced"],
            "inline_chunks": s["inline_chunks"]}


def _scan_json_streamed(source: str, path: str, storage_options: dict[str, Any] | None,
                        scan_kwargs: dict[str, Any]) -> tuple[dict[str, int], dict[str, Any]]:
    """Local JSON index written straight from the chunk tables (no dict of every chunk in memory)."""
    from . import writers
    from .api import scan

    def sink(tree: Any) -> dict[str, Any]:
        summary = writers.make_json_sink(path, storage_options)(tree)
        return {"summary": summary, "arrays": len(tree.arrays), "source": tree.provenance.get("source") or {}}

    out = scan(source, storage_options=storage_options, sink=sink, **scan_kwargs)
    s = out["summary"]
    counts = {"keys": s["keys"], "arrays": out["arrays"], "chunks": s["chunks_referenced"],
              "inline_chunks": s["inline_chunks"], "index_bytes": s["bytes"]}
    return counts, out["source"]


def _put_json(refs: dict[str, Any], index: str, storage_options: dict[str, Any] | None) -> int:
    from . import writers

    protocol, path = _split(index)
    if protocol == "file":
        writers.write_json(refs, path)
        return os.path.getsize(path)
    data = writers.dumps(refs).encode("utf-8")
    fs, p = _fs(index, storage_options)
    fs.pipe_file(p, data)  # one PUT: the object appears whole or not at all
    return len(data)


def _put_folder(local_dir: str, index: str, storage_options: dict[str, Any] | None) -> None:
    """Upload a parquet index folder: records first, ``.zmetadata`` last, stale records removed."""
    fs, base = _fs(index, storage_options)
    base = base.rstrip("/")
    wanted: set[str] = set()
    last = None
    for folder, _, names in os.walk(local_dir):
        for name in sorted(names):
            local = os.path.join(folder, name)
            remote = base + "/" + os.path.relpath(local, local_dir).replace(os.sep, "/")
            wanted.add(remote)
            if name == ".zmetadata" and folder == local_dir:
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


def _scan_parquet(source: str, index: str, storage_options: dict[str, Any] | None,
                  scan_kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    from .api import scan
    from .parquet import make_sink

    record_size = scan_kwargs.pop("record_size", None)
    protocol, path = _split(index)
    tmp = None if protocol == "file" else tempfile.mkdtemp(prefix="refindex-batch-")
    target = path if tmp is None else os.path.join(tmp, "index.refs.parq")
    inner = make_sink(target, storage_options, record_size=record_size)
    seen: dict[str, Any] = {}

    def sink(tree: Any) -> dict[str, Any]:
        seen.update(tree.provenance.get("source") or {})
        summary = inner(tree)
        summary["arrays"] = len(tree.arrays)
        return summary

    try:
        summary = scan(source, storage_options=storage_options, sink=sink, **scan_kwargs)
        if tmp is not None:
            _put_folder(target, index, storage_options)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    counts = {"keys": None, "arrays": summary.get("arrays"), "chunks": summary.get("chunks_referenced"),
              "inline_chunks": summary.get("inline_chunks"), "index_bytes": summary.get("bytes")}
    return counts, seen


def index_one(source: str, index: str, fmt: Format = "json", storage_options: dict[str, Any] | None = None,
              scan_kwargs: dict[str, Any] | None = None, options: str | None = None, isolate: bool = False,
              timeout: float | None = None) -> dict[str, Any]:
    """Scan ``source`` and write its index to ``index``; returns a manifest row (never raises).

    Runs wherever the batch sends it: this process, a local worker or a Dask worker.
    ``isolate``: run it in a fresh subprocess (crash / hang protection on Dask workers).
    """
    if isolate:
        from .isolate import DEFAULT_TIMEOUT, Worker

        kw = dict(source=source, index=index, fmt=fmt, storage_options=storage_options, scan_kwargs=scan_kwargs,
                  options=options)
        t0 = time.perf_counter()
        with Worker() as w:
            try:
                return w.run("refindex.batch:index_one", kw, timeout=timeout or DEFAULT_TIMEOUT, label=source)
            except RefindexError as e:
                return _failed(source, index, e, time.perf_counter() - t0, options)
    scan_kwargs = dict(scan_kwargs or {})
    t0 = time.perf_counter()
    try:
        if fmt == "parquet":
            counts, prov = _scan_parquet(source, index, storage_options, scan_kwargs)
        elif _split(index)[0] == "file":
            counts, prov = _scan_json_streamed(source, _split(index)[1], storage_options, scan_kwargs)
        else:
            from .api import scan

            refs = scan(source, storage_options=storage_options, **scan_kwargs)
            prov = (refs.get("refindex") or {}).get("source") or {}
            counts = _counts_json(refs)
            counts["index_bytes"] = _put_json(refs, index, storage_options)
    except Exception as e:  # noqa: BLE001 - one bad file must never stop the batch
        return _failed(source, index, e, time.perf_counter() - t0, options)
    row = FileResult(source=source, index=index, status="indexed", size=prov.get("size"), etag=prov.get("etag"),
                     mtime=prov.get("mtime"), seconds=round(time.perf_counter() - t0, 4), options=options,
                     finished=_now(), **counts)
    return row.as_dict()


def _failed(source: str, index: str, e: BaseException, seconds: float, options: str | None) -> dict[str, Any]:
    if isinstance(e, RefindexError):
        text = " ".join(str(e).split())
    else:  # not a RefindexError: a refindex bug or an environment problem, say which
        text = f"internal error: {type(e).__name__}: {' '.join(str(e).split())}"
    return FileResult(source=source, index=index, status="failed", seconds=round(seconds, 4), error=text,
                      options=options, finished=_now()).as_dict()


# ------------------------------------------------------------------ runners
Task = dict[str, Any]
OnResult = Callable[[dict[str, Any]], None]


def _run_inline(tasks: list[Task], on_result: OnResult) -> None:
    for t in tasks:
        on_result(index_one(**t))


def _run_local(tasks: list[Task], workers: int, timeout: float | None, on_result: OnResult) -> None:
    """``workers`` threads, each driving one isolated worker process, one file at a time."""
    from .isolate import DEFAULT_TIMEOUT, Worker

    pool: queue.SimpleQueue[Worker] = queue.SimpleQueue()
    all_workers = [Worker() for _ in range(workers)]
    for w in all_workers:
        pool.put(w)

    def run(task: Task) -> dict[str, Any]:
        w = pool.get()
        t0 = time.perf_counter()
        try:
            return w.run("refindex.batch:index_one", task, timeout=timeout or DEFAULT_TIMEOUT, label=task["source"])
        except RefindexError as e:  # crashed or timed out: the worker restarts on its next job
            return _failed(task["source"], task["index"], e, time.perf_counter() - t0, task.get("options"))
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


def _run_dask(tasks: list[Task], dask: Any, workers: int, on_result: OnResult) -> None:
    from distributed import as_completed as dask_completed

    client, cluster = _dask_client(dask, workers)
    try:
        futures = {client.submit(index_one, pure=False, key=f"refindex-index-{uuid.uuid4().hex}", **t): t
                   for t in tasks}
        for fut in dask_completed(list(futures)):
            t = futures[fut]
            try:
                on_result(fut.result())
            except Exception as e:  # noqa: BLE001 - e.g. KilledWorker after a worker crash
                on_result(_failed(t["source"], t["index"], RefindexError(f"Dask task failed: {type(e).__name__}: {e}",
                                                                         file=t["source"]), 0.0, t.get("options")))
            fut.release()
    finally:
        if client is not dask:  # a client made here (from an address or "local"): closed here
            client.close()
        if cluster is not None:
            cluster.close()


# ------------------------------------------------------------------ manifest
def read_manifest(url: str, storage_options: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Rows of a manifest keyed by source; {} when it does not exist or cannot be read."""
    try:
        fs, path = _fs(url, storage_options)
        if not fs.exists(path):
            return {}
        data = fs.cat_file(path)
        if url.endswith(".parquet"):
            import pyarrow.parquet as pq

            rows = pq.read_table(io.BytesIO(data)).to_pylist()
        else:
            rows = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    except Exception as e:  # a damaged manifest: fall back to the indexes' own provenance
        print(f"refindex batch: ignoring unreadable manifest {url}: {e}", file=sys.stderr)
        return {}
    return {r["source"]: r for r in rows if isinstance(r, dict) and r.get("source")}


def write_manifest(rows: list[dict[str, Any]], url: str, storage_options: dict[str, Any] | None = None) -> None:
    """Write the manifest atomically (JSON lines, or parquet when ``url`` ends in .parquet)."""
    from .writers import atomic_write_bytes

    if url.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist([{**r, "mtime": None if r.get("mtime") is None else str(r["mtime"])}
                                      for r in rows])
        buf = io.BytesIO()
        pq.write_table(table, buf)
        data = buf.getvalue()
    else:
        data = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    protocol, path = _split(url)
    if protocol == "file":
        atomic_write_bytes(path, data)
    else:
        fs, p = _fs(url, storage_options)
        fs.pipe_file(p, data)


# ------------------------------------------------------------------ planning
def _current_infos(urls: list[str], known: dict[str, dict[str, Any]], storage_options: dict[str, Any] | None
                   ) -> dict[str, dict[str, Any] | RefindexError]:
    """size/etag/mtime of every input now (listings reused; the rest fetched by 16 threads)."""
    from .source import _file_info

    out: dict[str, dict[str, Any] | RefindexError] = {}
    for u, detail in known.items():
        try:
            out[u] = _normal_info(detail)
        except RefindexError as e:
            out[u] = e

    def stat(u: str) -> dict[str, Any] | RefindexError:
        try:
            fs, path = _fs(u, storage_options)
            return _file_info(fs, path)
        except RefindexError as e:
            return e
        except Exception as e:  # noqa: BLE001
            return RefindexError(f"cannot stat: {type(e).__name__}: {e}", file=u)

    todo = [u for u in urls if u not in out]
    with ThreadPoolExecutor(max_workers=16) as ex:
        for u, info in zip(todo, ex.map(stat, todo)):
            out[u] = info
    return out


def _plan(urls: list[str], infos: dict[str, Any], previous: dict[str, dict[str, Any]], fmt: Format,
          output: str | None, root: str | None, options: str, force: bool,
          storage_options: dict[str, Any] | None) -> tuple[list[FileResult | None], list[tuple[int, str, str]]]:
    """Per input: a finished row (up to date / cannot stat) or a job (position, source, index)."""
    rows: list[FileResult | None] = []
    jobs: list[tuple[int, str, str]] = []
    indexes: dict[str, str] = {}
    for i, url in enumerate(urls):
        index = index_location(url, fmt, output, root)
        if index in indexes:
            raise RefindexError(f"two inputs would share the index {index}: {indexes[index]} and {url}")
        indexes[index] = url
        now = infos[url]
        if isinstance(now, RefindexError):
            rows.append(FileResult(source=url, index=index, status="failed", error=" ".join(str(now).split()),
                                   options=options, finished=_now(), seconds=0.0))
            continue
        if not force:
            prev = previous.get(url)
            fresh = None
            if prev is not None:
                if (prev.get("status") in ("indexed", "up_to_date") and prev.get("index") == index
                        and prev.get("options") == options and unchanged(prev, now)
                        and _index_exists(index, fmt, storage_options)):
                    fresh = FileResult(**{**{k: prev.get(k) for k in FileResult.__dataclass_fields__},
                                          "status": "up_to_date", "seconds": 0.0})
            else:  # no manifest row (first run with an existing index, or an interrupted run)
                prov = _index_provenance(index, fmt, storage_options)
                if prov is not None and unchanged(prov, now):
                    fresh = FileResult(source=url, index=index, status="up_to_date", size=prov.get("size"),
                                       etag=prov.get("etag"), mtime=prov.get("mtime"), seconds=0.0, options=options,
                                       finished=_now())
            if fresh is not None:
                rows.append(fresh)
                continue
        rows.append(None)
        jobs.append((i, url, index))
    return rows, jobs


# ------------------------------------------------------------------ API
def run_batch(
    inputs: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    output: str | os.PathLike | None = None,
    workers: int | None = None,
    dask: Any = None,
    force: bool = False,
    format: Format = "json",  # noqa: A002 - mirrors the CLI's --format
    storage_options: dict[str, Any] | None = None,
    progress: bool = True,
    manifest: str | os.PathLike | None = None,
    timeout: float | None = None,
    isolate: bool = False,
    combine: str | os.PathLike | None = None,
    concat_dims: Sequence[str] = ("time",),
    identical_dims: Sequence[str] = (),
    check: Any = None,
    **scan_kwargs: Any,
) -> BatchReport:
    """Index every input, skipping those already up to date; see the module docstring.

    ``output``: folder / URL prefix for the indexes (default: beside each input).
    ``workers``: local worker processes (default: cores; 0: this process).  ``dask``:
    ``"local"``, a scheduler address or a ``distributed.Client``.  ``timeout``: seconds
    per file before its worker is killed (default 600).  ``manifest``: where to write the
    manifest.  ``combine``: also write one kerchunk-combined index there.  ``check``: a
    ZEP 6 object-model template (dict or JSON path, see :mod:`refindex.schema`) every
    index must follow; each row's result is in the manifest's ``check`` column.
    ``scan_kwargs`` go to :func:`refindex.scan` (e.g. ``convention``, ``on_unsupported``).
    Returns a :class:`BatchReport`; failures are in it, never raised.
    """
    if format not in SUFFIX:
        raise RefindexError(f"unknown format {format!r} (json or parquet)")
    for bad in ("stats", "sink", "url", "follow_external"):
        if scan_kwargs.get(bad):
            raise RefindexError(f"{bad} is not supported by batch indexing")
    if combine is not None and format != "json":
        raise RefindexError("--combine needs JSON indexes (format='json')")
    t0 = time.perf_counter()
    urls, known = expand_inputs(inputs, storage_options)
    if not urls:
        raise RefindexError("no input files (nothing matched)")
    root = common_root(urls) if (output is not None or manifest is None) else None
    out = _normal(os.fspath(output)) if output is not None else None
    if manifest is not None:
        manifest_url = _normal(os.fspath(manifest))
    else:
        base = out if out is not None else root
        manifest_url = (os.path.join(base, MANIFEST_NAME) if _split(base)[0] == "file"
                        else base.rstrip("/") + "/" + MANIFEST_NAME)
    options = options_fingerprint(format, scan_kwargs)
    template = None
    if check is not None:
        from . import schema

        template = schema.load_template(check)  # a bad template fails before any work
    previous = {} if force else read_manifest(manifest_url, storage_options)
    infos = _current_infos(urls, known, storage_options)
    rows, jobs = _plan(urls, infos, previous, format, out, root, options, force, storage_options)

    n_workers = (os.cpu_count() or 1) if workers is None else int(workers)
    tasks = [dict(source=src, index=idx, fmt=format, storage_options=storage_options, scan_kwargs=scan_kwargs,
                  options=options) for _, src, idx in jobs]
    if isolate and (dask is not None or (workers is not None and workers <= 0)):  # local workers: isolated anyway
        for t in tasks:
            t.update(isolate=True, timeout=timeout)
    position = {src: i for i, src, _ in jobs}
    bar = _progress(len(tasks), len(urls) - len(tasks), progress)
    failed = 0

    def run_check(r: FileResult) -> None:
        if template is None or r.status == "failed":
            return
        from . import schema

        try:
            r.check = schema.check(template, r.index, storage_options=storage_options).as_dict()
        except RefindexError as e:
            r.check = {"ok": False, "differences": [{"path": "/", "message": " ".join(str(e).split())}]}

    for r in rows:
        if r is not None:
            run_check(r)

    def on_result(row: dict[str, Any]) -> None:
        nonlocal failed
        result = FileResult(**row)
        run_check(result)
        rows[position[row["source"]]] = result
        failed += row["status"] == "failed"
        if bar is not None:
            bar.set_postfix(failed=failed, refresh=False)
            bar.update(1)

    try:
        if not tasks:
            pass
        elif dask is not None:
            _run_dask(tasks, dask, n_workers or 1, on_result)
        elif n_workers <= 0:
            _run_inline(tasks, on_result)
        else:
            _run_local(tasks, min(n_workers, len(tasks)), timeout, on_result)
    finally:
        if bar is not None:
            bar.close()
        # Also on interruption: what finished is recorded (unfinished inputs are simply absent).
        write_manifest([r.as_dict() for r in rows if r is not None], manifest_url, storage_options)
    report = BatchReport(results=[r for r in rows if r is not None], manifest=manifest_url,
                         seconds=time.perf_counter() - t0)
    if combine is not None:
        report.combined = combine_indexes(report, combine, concat_dims=concat_dims, identical_dims=identical_dims,
                                          storage_options=storage_options, timeout=timeout)
    return report


def _progress(total: int, skipped: int, enabled: bool):
    if not enabled or total == 0:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="file", desc=f"refindex batch ({skipped} up to date)", file=sys.stderr,
                dynamic_ncols=True, smoothing=0.1)


# ------------------------------------------------------------------ combine
def _combine_job(indexes: list[str], output: str, storage_options: dict[str, Any] | None,
                 concat_dims: list[str], identical_dims: list[str]) -> dict[str, Any]:
    """Runs in a worker process: kerchunk's MultiZarrToZarr over the per-file indexes."""
    try:
        from kerchunk.combine import MultiZarrToZarr
    except ImportError as e:
        raise RefindexError(f"--combine needs kerchunk ({e})") from e
    docs = []
    for idx in indexes:
        fs, path = _fs(idx, storage_options)
        docs.append(json.loads(fs.cat_file(path)))
    remote = None
    first = _split(docs[0].get("refindex", {}).get("source", {}).get("url", "") or "")[0] if docs else "file"
    if first != "file":
        remote = first
    try:
        combined = MultiZarrToZarr(docs, concat_dims=list(concat_dims), identical_dims=list(identical_dims),
                                   remote_protocol=remote, remote_options=storage_options if remote else None
                                   ).translate()
    except Exception as e:  # noqa: BLE001 - kerchunk raises anything
        raise RefindexError(f"kerchunk's MultiZarrToZarr could not combine {len(docs)} indexes "
                            f"(concat_dims={list(concat_dims)}): {type(e).__name__}: {e}") from e
    size = _put_json(combined, output, storage_options)
    return {"keys": len(combined.get("refs", {})), "bytes": size}


def combine_indexes(report: BatchReport, output: str | os.PathLike, *, concat_dims: Sequence[str] = ("time",),
                    identical_dims: Sequence[str] = (), storage_options: dict[str, Any] | None = None,
                    timeout: float | None = None) -> str:
    """Merge the batch's JSON indexes into one at ``output`` (kerchunk, under a time limit)."""
    from .isolate import DEFAULT_TIMEOUT, Worker

    if report.failed:
        names = ", ".join(r.source for r in report.failed[:5])
        raise RefindexError(f"cannot combine: {len(report.failed)} input(s) failed ({names})")
    indexes = [r.index for r in report.results]
    target = _normal(os.fspath(output))
    with Worker() as w:
        w.run("refindex.batch:_combine_job",
              dict(indexes=indexes, output=target, storage_options=storage_options, concat_dims=list(concat_dims),
                   identical_dims=list(identical_dims)),
              timeout=timeout or DEFAULT_TIMEOUT, label=f"combine -> {target}")
    return target
