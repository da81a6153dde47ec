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
    :class:`refindex.isolation.worker.Worker` fed one local file at a time, or a group of up to
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
    :mod:`refindex.feedback.progress`.

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

from ._combine import combine_indexes
from ._inputs import expand_inputs, index_location
from ._manifest import read_manifest, write_manifest
from ._results import BatchReport, FileResult
from ._run import run_batch
from ._task import Task, index_one

__all__ = ["BatchReport", "FileResult", "Task", "combine_indexes", "expand_inputs", "index_location", "index_one",
           "read_manifest", "run_batch", "write_manifest"]
