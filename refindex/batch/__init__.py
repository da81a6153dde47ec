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

import os
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, Unpack

from .. import urls
from ..errors import RefindexError
from ..options import ScanKeywords, ScanOptions, options_from
from ._combine import combine_indexes
from ._inputs import MANIFEST_NAME, SUFFIX, Format, common_root, expand_inputs, index_location
from ._manifest import current_infos, options_fingerprint, plan, read_manifest, write_manifest
from ._results import BatchReport, FileResult
from ._runners import run_dask, run_inline, run_local
from ._task import Task, index_one

__all__ = ["BatchReport", "FileResult", "Task", "combine_indexes", "expand_inputs", "index_location", "index_one",
           "read_manifest", "run_batch", "write_manifest"]


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
    record_size: int | None = None,
    options: ScanOptions | None = None,
    **keywords: Unpack[ScanKeywords],
) -> BatchReport:
    """Index every input, skipping those already up to date; see the module docstring.

    ``output``: folder / URL prefix for the indexes (default: beside each input).
    ``workers``: local worker processes (default: cores; 0: this process).  ``dask``:
    ``"local"``, a scheduler address or a ``distributed.Client``.  ``timeout``: seconds
    per file before its worker is killed (default 600).  ``manifest``: where to write the
    manifest.  ``combine``: also write one kerchunk-combined index there.  ``check``: a
    ZEP 6 object-model template (dict or JSON path, see :mod:`refindex.read`) every index
    must follow; each row's result is in the manifest's ``check`` column.  Scan options as
    an ``options`` object and/or keywords (e.g. ``convention``, ``on_unsupported``).
    Returns a :class:`BatchReport`; failures are in it, never raised.
    """
    if format not in SUFFIX:
        raise RefindexError(f"unknown format {format!r} (json or parquet)")
    scan_options = options_from(options, keywords).but(storage_options=dict(storage_options or {}))
    for bad in ("url", "follow_external"):
        if getattr(scan_options, bad):
            raise RefindexError(f"{bad} is not supported by batch indexing")
    if combine is not None and format != "json":
        raise RefindexError("--combine needs JSON indexes (format='json')")
    if combine is not None and scan_options.zarr_format != 2:
        raise RefindexError("--combine needs zarr v2 indexes (kerchunk's MultiZarrToZarr reads no zarr.json)")
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
    infos = current_infos(sources, known, storage_options)
    rows, jobs = plan(sources, infos, previous, format, out, root, fingerprint, force, storage_options)
    n_workers = (os.cpu_count() or 1) if workers is None else int(workers)
    isolated = isolate and (dask is not None or n_workers <= 0)  # local workers are isolated anyway
    tasks = [Task(src, idx, format, scan_options, record_size, fingerprint, isolated, timeout) for _, src, idx in jobs]
    collect = _Collector(rows, {src: i for i, src, _ in jobs}, template, storage_options,
                         _progress(len(tasks), len(sources) - len(tasks), progress))
    try:
        if not tasks:
            pass
        elif dask is not None:
            run_dask(tasks, dask, n_workers or 1, collect)
        elif n_workers <= 0:
            run_inline(tasks, collect)
        else:
            run_local(tasks, min(n_workers, len(tasks)), timeout, collect)
    finally:
        collect.close()
        # Also on interruption: what finished is recorded (unfinished inputs are simply absent).
        write_manifest([r.as_dict() for r in rows if r is not None], manifest_url, storage_options)
    report = BatchReport(results=[r for r in rows if r is not None], manifest=manifest_url,
                         seconds=time.perf_counter() - t0)
    if combine is not None:
        report.combined = combine_indexes(report, combine, concat_dims=concat_dims, identical_dims=identical_dims,
                                          storage_options=storage_options, timeout=timeout)
    return report


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
                 storage_options: dict[str, Any] | None, bar: Any):
        self.rows, self.position, self.template = rows, position, template
        self.storage_options, self.bar, self.failed = storage_options, bar, 0
        for r in rows:
            if r is not None:
                self.check(r)

    def check(self, r: FileResult) -> None:
        if self.template is None or r.status == "failed":
            return
        from ..read import check

        try:
            r.check = check(self.template, r.index, storage_options=self.storage_options).as_dict()
        except RefindexError as e:
            r.check = {"ok": False, "differences": [{"path": "/", "message": " ".join(str(e).split())}]}

    def __call__(self, row: dict[str, Any]) -> None:
        result = FileResult(**row)
        self.check(result)
        self.rows[self.position[row["source"]]] = result
        self.failed += row["status"] == "failed"
        if self.bar is not None:
            self.bar.set_postfix(failed=self.failed, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _progress(total: int, skipped: int, enabled: bool) -> Any:
    if not enabled or total == 0:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="file", desc=f"refindex batch ({skipped} up to date)", file=sys.stderr,
                dynamic_ncols=True, smoothing=0.1)
