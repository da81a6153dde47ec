"""The Python API for making indexes: keyword arguments at the edge, one :class:`ScanOptions` inside."""

from __future__ import annotations

import os
from typing import Any, Unpack

from . import pipeline
from .model import RefsDocument
from .options import ScanKeywords, ScanOptions, options_from
from .pipeline import WriteSummary, __version__
from .progress import Progress

__all__ = ["__version__", "scan", "scan_to_file", "scan_to_parquet"]


def scan(source: str | os.PathLike, *, options: ScanOptions | None = None, stats: dict[str, Any] | None = None,
         progress: bool | Progress = False, **keywords: Unpack[ScanKeywords]) -> RefsDocument:
    """Index one HDF5 file; returns the ReferenceFileSystem dict (version 1).

    ``source``: local path or fsspec URL (``s3://``, ``https://``, ``gs://``...).  Options
    come as an ``options=ScanOptions(...)`` object and/or as keywords (the fields of
    :class:`~refindex.options.ScanOptions`): ``url`` (what the references point at),
    ``storage_options`` (fsspec, never written into the index), ``convention``,
    ``inline_threshold``, ``inline_dataset_threshold``, ``inline_max``,
    ``contiguous_chunk_bytes``, ``on_unsupported``, ``follow_external`` (also index the
    files external links point into; embedded under ``refs["refindex"]["external"]``),
    ``allowed_root`` / ``allow_outside``, ``max_inline_total``, ``check_sample``, ``cache``,
    ``isolate`` / ``timeout`` (libhdf5 in a worker process, see :mod:`refindex.isolate`),
    ``zarr_format`` (2, the default, or 3: ``zarr.json`` documents, chunk keys ``c/i/j``,
    hdmf-zarr 0.14's v3 convention for NWB files).
    ``stats``: filled with request/byte counts and timings.  ``progress``: True draws a
    bar on stderr, or pass an object with the methods of :class:`refindex.progress.Progress`.

    Isolation is off by default here, while ``refindex scan`` isolates by default: a
    damaged file can make libhdf5 abort or loop forever, which takes the calling process
    with it, but a library must not fork or start processes behind its caller's back
    (forking a program that runs threads or an event loop can deadlock the child; a
    caller may manage processes, signals and limits itself).  Pass ``isolate=True`` for
    files you did not make: a fresh-interpreter worker (~0.3 s to start) turns a crash
    into WorkerCrashed and a hang into WorkerTimeout after ``timeout`` seconds (600).
    """
    return pipeline.scan_refs(source, options_from(options, keywords), stats=stats, progress=progress)


def scan_to_file(source: str | os.PathLike, output: str | os.PathLike, *, format: pipeline.Format = "json",  # noqa: A002
                 return_refs: bool = False, record_size: int | None = None, options: ScanOptions | None = None,
                 stats: dict[str, Any] | None = None, progress: bool | Progress = False,
                 **keywords: Unpack[ScanKeywords]) -> WriteSummary:
    """Scan ``source`` and write its index to ``output`` atomically; returns a summary.

    The summary has ``format``, ``keys``, ``chunks_referenced``, ``inline_chunks``,
    ``bytes`` and ``skipped`` (parquet: ``records`` too).  JSON is streamed straight from
    the scanned chunk tables (the text is what :func:`scan`'s dict would give), so millions
    of chunks cost little memory.  ``return_refs=True`` also builds the dict and returns it
    as ``summary["refs"]``.  ``format="parquet"``: a folder in fsspec's parquet reference
    layout (see :func:`scan_to_parquet`).  Options as for :func:`scan`;
    ``follow_external`` writes the linked files' indexes beside ``output``.
    """
    return pipeline.write_index(source, output, options_from(options, keywords), format=format,
                                record_size=record_size, keep_refs=return_refs, stats=stats, progress=progress)


def scan_to_parquet(source: str | os.PathLike, output: str | os.PathLike, *, record_size: int | None = None,
                    options: ScanOptions | None = None, stats: dict[str, Any] | None = None,
                    progress: bool | Progress = False, **keywords: Unpack[ScanKeywords]) -> WriteSummary:
    """Scan ``source`` into parquet refs (fsspec's LazyReferenceMapper layout) in the folder ``output``.

    Streamed from the chunk tables, so memory stays bounded for millions of chunks; the
    folder appears atomically.  ``record_size``: references per record file (default
    100,000).  Returns a summary (records, chunks, bytes written).
    """
    return pipeline.write_index(source, output, options_from(options, keywords), format="parquet",
                                record_size=record_size, stats=stats, progress=progress)
