"""The Python API for making indexes: keyword arguments at the edge, one :class:`ScanOptions` inside."""

from __future__ import annotations

import os
from typing import Any, Unpack

from . import pipeline
from .model import RefsDocument
from .options import ScanKeywords, ScanOptions, options_from
from .pipeline import WriteSummary, __version__
from .feedback.progress import ProgressSetting

__all__ = ["__version__", "scan", "scan_to_file", "scan_to_icechunk", "scan_to_parquet"]


def scan(source: str | os.PathLike, *, options: ScanOptions | None = None, stats: dict[str, Any] | None = None,
         progress: ProgressSetting = "auto", **keywords: Unpack[ScanKeywords]) -> RefsDocument:
    """Index one HDF5 file; returns the ReferenceFileSystem dict (version 1).

    ``source``: local path or fsspec URL (``s3://``, ``https://``, ``gs://``...).  Options
    come as an ``options=ScanOptions(...)`` object and/or as keywords (the fields of
    :class:`~refindex.options.ScanOptions`): ``url`` (what the references point at),
    ``storage_options`` (fsspec, never written into the index), ``convention``,
    ``inline_threshold``, ``inline_dataset_threshold``, ``inline_max``,
    ``contiguous_chunk_bytes``, ``on_unsupported``, ``follow_external`` (also index the
    files external links point into; embedded under ``refs["refindex"]["external"]``),
    ``allowed_root`` / ``allow_outside``, ``max_inline_total``, ``check_sample``, ``fetch``
    (how a remote file's bytes are fetched, :class:`~refindex.options.FetchOptions`; ``cache``
    is its former name),
    ``isolate`` / ``timeout`` (libhdf5 in a worker process, see :mod:`refindex.isolation.worker`),
    ``zarr_format`` (2, the default, or 3: ``zarr.json`` documents, chunk keys ``c/i/j``,
    hdmf-zarr 0.14's v3 convention for NWB files).
    ``stats``: filled with request/byte counts and timings.  ``progress``: ``"auto"`` (the
    default) draws a bar in a Jupyter notebook once the scan has run a few seconds; True
    always (a notebook widget, a terminal bar, or plain lines in a log); False never; or pass
    an object with the methods of :class:`refindex.feedback.progress.Progress`.

    Isolation is off by default here, while ``refindex scan`` isolates by default: a
    damaged file can make libhdf5 abort or loop forever, which takes the calling process
    with it, but a library must not fork or start processes behind its caller's back
    (forking a program that runs threads or an event loop can deadlock the child; a
    caller may manage processes, signals and limits itself).  Pass ``isolate=True`` for
    files you did not make: a fresh-interpreter worker (~0.3 s to start) turns a crash
    into WorkerCrashed and a hang into WorkerTimeout after ``timeout`` seconds (default:
    ``refindex.options.TIME_LIMIT_POLICY``).
    """
    return pipeline.scan_refs(source, options_from(options, keywords), stats=stats, progress=progress)


def scan_to_file(source: str | os.PathLike, output: str | os.PathLike, *, format: pipeline.Format = "json",  # noqa: A002
                 return_refs: bool = False, record_size: int | None = None, options: ScanOptions | None = None,
                 stats: dict[str, Any] | None = None, progress: ProgressSetting = "auto",
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
                    progress: ProgressSetting = "auto", **keywords: Unpack[ScanKeywords]) -> WriteSummary:
    """Scan ``source`` into parquet refs (fsspec's LazyReferenceMapper layout) in the folder ``output``.

    Streamed from the chunk tables, so memory stays bounded for millions of chunks; the
    folder appears atomically.  ``record_size``: references per record file (default
    100,000).  Returns a summary (records, chunks, bytes written).
    """
    return pipeline.write_index(source, output, options_from(options, keywords), format="parquet",
                                record_size=record_size, stats=stats, progress=progress)


def scan_to_icechunk(source: str | os.PathLike, repository: str | os.PathLike, *, group: str = "",
                     branch: str = "main", repository_options: dict[str, Any] | None = None,
                     options: ScanOptions | None = None, stats: dict[str, Any] | None = None,
                     progress: ProgressSetting = "auto", **keywords: Unpack[ScanKeywords]) -> WriteSummary:
    """Scan ``source`` into an Icechunk repository (a local folder or ``s3://bucket/prefix``) and commit once.

    The repository is created if missing and declares a virtual chunk container for every
    URL prefix the chunks are read from (the source's folder, bucket or host); readers
    authorize exactly those.  The index is the zarr v3 one (hdmf-zarr's convention for NWB
    files) placed at ``group`` ("" : the root; an earlier index there is replaced) on
    ``branch`` (created from main when missing); chunks are virtual references, inline data
    native chunks.  The commit's message names the source, its size/etag/mtime and
    refindex's version; its metadata holds the provenance.  A scan or write that fails
    commits nothing.  ``repository_options``: s3fs-style options for the repository
    (default: ``storage_options``, which reach the source).  An attribute holding NaN or an
    infinity (Icechunk stores strict JSON) fails naming it, or with
    ``on_unsupported="skip"`` is left out and listed in ``skipped``.
    Returns a summary: ``snapshot``, ``group``, ``containers``, counts, ``skipped``.
    """
    from .formats.icechunk import IcechunkTarget

    opts = options_from(options, keywords)
    target = IcechunkTarget(os.fspath(repository), branch=branch, group=group,
                            storage_options=dict(opts.storage_options if repository_options is None
                                                 else repository_options),
                            source_options=dict(opts.storage_options))
    return pipeline.write_icechunk_index(source, target, opts, stats=stats, progress=progress)
