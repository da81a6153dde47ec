"""The one place that puts scanning and writing together.

source -> scanner -> convention -> provenance -> safety gate -> writer.  The API, the
command line, batch tasks and worker processes all come through here with one
:class:`~refindex.options.ScanOptions`; nothing below this module knows about the others.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal, TypedDict

from . import formats, urls
from .checks import safety
from .errors import RefindexError, RefindexWarning, UnsupportedError
from .model import RefsDocument, Tree, external_sources
from .options import ScanOptions, stall_limit_of
from .feedback.progress import ProgressSetting, ScanProgress, watch
from .scanner import ScanContext, choose_pages, scan_file
from .source import ReadRecorder, Source, open_source

from . import __version__  # one version for the package
Format = Literal["json", "parquet", "icechunk"]
ONLY_THROUGH_REFINDEX = (
    "{url}: the server ignores range requests (it sends the whole file for a part of it), so this index reads "
    "only through refindex (refindex.open, h5py_file, open_nwb), which cuts each chunk out of the whole answer; "
    "other readers of it (fsspec and zarr without refindex) get the whole file for each chunk and fail "
    "(\"Error -3 while decompressing data: incorrect header check\"). The index records it (source.range_requests: "
    "false). To share the index, serve the file from a server that supports range requests (nginx, Apache, S3 and "
    "most object stores do) and scan it there")
FORMATS = ("json", "parquet")  # files and folders written by write_index; "icechunk": write_icechunk_index


class WriteSummary(TypedDict, total=False):
    """What writing an index did: counts, bytes, what was skipped (and the index itself when asked)."""

    format: str
    zarr_format: int  # zarr v3 indexes only
    keys: int
    records: int  # parquet: record files written
    chunks_referenced: int
    inline_chunks: int
    bytes: int
    skipped: list[dict[str, str]]
    arrays: int
    source: dict[str, Any]  # what the index records of its source: url, size, etag/mtime
    refs: RefsDocument
    # Icechunk: the commit, where it went, and the virtual chunk containers it reads through
    snapshot: str
    repository: str
    branch: str
    group: str
    containers: list[str]


# ---------------------------------------------------------------------- scanning
@dataclass
class Scanned:
    """A file's :class:`Tree` as the scanner left it (no convention yet), and what an index
    records of its source.  One scan can make indexes of both zarr formats: each takes its
    own copy (``copy.deepcopy``) through :func:`prepare_tree`."""

    tree: Tree
    label: str  # the file as the user named it (error messages)
    source: dict[str, Any]  # {"url": what the references point at, size, etag/mtime}


def scan_tree(source: str | os.PathLike, options: ScanOptions, *, stats: dict[str, Any] | None = None,
              progress: ProgressSetting = None) -> Tree:
    """Scan ``source`` into a :class:`Tree` with its convention applied and its provenance filled in."""
    return prepare_tree(scan_source(source, options, stats=stats, progress=progress), options)


def scan_source(source: str | os.PathLike, options: ScanOptions, *, stats: dict[str, Any] | None = None,
                progress: ProgressSetting = None) -> Scanned:
    """Run the scanner over ``source``: the Tree, before any convention (see :func:`prepare_tree`)."""
    with opened_for_scan(source, options) as opened:
        return opened.scan(stats=stats, progress=progress)


@dataclass
class OpenedScan:
    """A source opened (and its metadata prefetched) for a scan that has not walked it yet: what the
    h5py road on the fly looks at before it decides where the walk runs (refindex.read.h5py_road)."""

    src: Source
    options: ScanOptions
    recorder: ReadRecorder | None

    def scan(self, *, stats: dict[str, Any] | None = None, progress: ProgressSetting = None) -> Scanned:
        """The walk of the opened file: its Tree, before any convention."""
        src, options, recorder = self.src, self.options, self.recorder
        target = safety.strip_credentials(options.url or src.url)
        safety.check_target_url(target, explicit=options.url is not None)
        bar = ScanProgress.of(progress, src.url)
        ctx = ScanContext(src.h5, target, src.size, options, src.read_many, src.fs_for, label=src.url,
                          stock_codec=output_format(options).stock_codec, recorder=recorder,
                          **({"progress": bar} if bar is not None else {}))
        try:
            tree = scan_file(ctx)
            if recorder is not None:
                tree.pages = choose_pages(recorder, src.size, src.page_bytes, tree)
        except RefindexError:
            raise
        except Exception as e:  # libhdf5 errors on damaged files surface as OSError/KeyError/...
            raise RefindexError(f"{type(e).__name__}: {e}", file=src.url) from e
        finally:
            if bar is not None:
                bar.close()
        # size/etag/mtime describe the bytes scanned; when refs point elsewhere (a published
        # copy), only the size is known to hold for the target too, and the fingerprint of the
        # bytes the index depends on (it names places in the file, not the file's name).
        described = dict(src.info) if target == src.url else {"size": src.info["size"]}
        described["fingerprint"] = src.fingerprint(ctx.header_addresses(), ctx.copied)
        if target == src.url and not src.serves_ranges():
            described["range_requests"] = False  # the h5py road reads such a file whole (refindex.read)
            warnings.warn(ONLY_THROUGH_REFINDEX.format(url=src.url), RefindexWarning, stacklevel=2)
        # Timing varies run to run: report it in stats, keep it out of the (deterministic) index.
        seconds = tree.provenance.pop("scan_seconds", None)
        if stats is not None:
            stats.update(src.stats.as_dict())
            if src.cache is not None:  # bytes_fetched counts what crossed the network, this each byte once
                stats["bytes_distinct"] = src.distinct_bytes()
            stats["scan_seconds"] = seconds
            stats["chunk_index"] = ctx.index_stats.as_dict()
        return Scanned(tree, src.url, {"url": target, **described})

    def refs(self, *, progress: ProgressSetting = None) -> RefsDocument:
        """The index of the opened file (:func:`scan_refs` of it, without external files followed)."""
        return refs_of_tree(prepare_tree(self.scan(progress=progress), self.options), self.options)


@contextmanager
def opened_for_scan(source: str | os.PathLike, options: ScanOptions) -> Iterator[OpenedScan]:
    """``source`` opened for a scan with ``options`` (:func:`~refindex.source.open_source`, recording
    the pages its index carries), closed on the way out."""
    recorder = ReadRecorder(options.page_size) if options.pages else None
    watch(stall_limit_of(source, options.timeout))  # libhdf5 from here: a worker that stops moving is stopped
    try:
        with open_source(source, options.storage_options, options.fetch, recorder) as src:
            yield OpenedScan(src, options, recorder)
    finally:
        watch(None)


def output_format(options: ScanOptions) -> formats.ZarrFormat:
    """The output format ``options`` ask for: chosen here, then asked (never ``zarr_format`` tested)."""
    return formats.for_zarr(options.zarr_format)


def prepare_tree(scanned: Scanned, options: ScanOptions) -> Tree:
    """The scanned Tree made ready for an index of ``options.zarr_format``: its convention,
    zarr's verdict on every array, the inline total, the provenance."""
    tree, file, fmt = scanned.tree, scanned.label, output_format(options)
    chosen, refused = fmt.apply_convention(tree, options.convention)
    for path, reason in refused:
        refuse(tree, options, file, path, reason)
    check_readable(tree, options, file)
    safety.check_inline_total(tree, options.max_inline_total, file=file)
    tree.provenance.update({"refindex_version": __version__, "source": dict(scanned.source),
                            "convention": chosen, "options": options.recorded(), "codecs": fmt.codec_names(tree)})
    return tree


def refuse(tree: Tree, options: ScanOptions, file: str, path: str, reason: str) -> None:
    """What cannot be represented: an error naming the dataset, or (``on_unsupported="skip"``)
    the array dropped and recorded in the index's ``skipped`` list."""
    if options.on_unsupported != "skip":
        raise UnsupportedError(reason, file=file, path=path)
    tree.arrays.pop(path, None)
    tree.skipped.append({"path": path, "reason": reason})


def check_readable(tree: Tree, options: ScanOptions, file: str) -> None:
    """Every array's metadata parsed by zarr the way a reader's zarr will (dtype, fill value,
    codecs): what zarr refuses fails naming the dataset, or is recorded with ``on_unsupported="skip"``."""
    fmt = output_format(options)
    for path, node in list(tree.arrays.items()):
        why = fmt.refusal(node, portable=options.portable)
        if why is not None:
            refuse(tree, options, file, path, why)


def in_worker(job: Any, source: str | os.PathLike, options: ScanOptions, stats: dict[str, Any] | None) -> Any:
    """``job(source, options)`` in a worker process killed after ``options.timeout``; its stats merged."""
    from .isolation.worker import run_isolated
    from .options import time_limit_of

    result, job_stats = run_isolated(job, {"source": os.fspath(source), "options": options},
                                     timeout=options.timeout or time_limit_of(source))
    if stats is not None:
        stats.update(job_stats)
    return result


def scan_refs(source: str | os.PathLike, options: ScanOptions, *, stats: dict[str, Any] | None = None,
              progress: ProgressSetting = None) -> RefsDocument:
    """The RFS dict of ``source`` (in a worker process with ``options.isolate``), through the safety gate.

    ``options.follow_external``: the files external links point into are indexed too and
    embedded under ``refs["refindex"]["external"][source]["refs"]``.
    """
    if options.isolate:
        return in_worker(scan_refs_job, source, options, stats)
    tree = scan_tree(source, options, stats=stats, progress=progress)
    refs = refs_of_tree(tree, options)
    if options.follow_external:
        read_url = urls.normalise(os.fspath(source))
        outer = options if options.allow_outside or options.allowed_root is not None else options.but(
            allowed_root=urls.folder(read_url))  # linked files of linked files: the same root
        _follow_external(refs, read_url, tree.url, outer, {read_url})
    return refs


def refs_of_tree(tree: Tree, options: ScanOptions) -> RefsDocument:
    """The RFS dict of a prepared Tree, through the safety gate."""
    refs = output_format(options).to_refs(tree)
    safety.check_publishable(refs, options.storage_options, file=tree.url)
    return refs


def scan_refs_job(source: str, options: ScanOptions) -> tuple[RefsDocument, dict[str, Any]]:
    """:func:`scan_refs` as a worker job: the refs and the scan's stats."""
    stats: dict[str, Any] = {}
    refs = scan_refs(source, options.but(isolate=False), stats=stats)
    return refs, stats


def _follow_external(refs: RefsDocument, read_url: str, chunk_url: str, options: ScanOptions,
                     seen: set[str]) -> None:
    """Index the files external links in ``refs`` point into (recursively, each file once)."""
    out: dict[str, Any] = {}
    for source in external_sources(refs):
        entry: dict[str, Any] = {"url": urls.beside(chunk_url, source)}
        sub_read = urls.beside(read_url, source)
        try:
            safety.resolve_inside(source, read_url, allowed_root=options.allowed_root,
                                  allow_outside=options.allow_outside, what="externally linked file", file=read_url)
        except RefindexError as e:
            entry["error"] = str(e)
            out[source] = entry
            continue
        if sub_read in seen:
            entry["note"] = "indexed elsewhere in this index (link cycle)"
        else:
            seen.add(sub_read)
            try:
                entry["refs"] = scan_refs(sub_read, options.but(url=entry["url"], follow_external=False))
                _follow_external(entry["refs"], sub_read, entry["url"], options, seen)
            except RefindexError as e:
                entry["error"] = str(e)
        out[source] = entry
    if out:
        refs.setdefault("refindex", {})["external"] = out


# ---------------------------------------------------------------------- writing
def write_index(source: str | os.PathLike, output: str | os.PathLike, options: ScanOptions, *,
                format: Format = "json", record_size: int | None = None, keep_refs: bool = False,  # noqa: A002
                stats: dict[str, Any] | None = None, progress: ProgressSetting = None) -> WriteSummary:
    """Scan ``source`` and write its index to ``output`` (a JSON file or a parquet folder), atomically.

    JSON is streamed straight from the chunk tables (no dict of every chunk), unless the
    dict is needed anyway: ``keep_refs`` (it is returned as ``summary["refs"]``),
    ``options.follow_external`` (the linked files' indexes are written beside ``output``)
    or ``options.isolate`` (the worker returns the dict).
    """
    if format not in FORMATS:
        raise RefindexError(f"unknown output format {format!r} (json or parquet)", file=os.fspath(output))
    if not urls.is_local(os.fspath(output)):  # else it would land in a local folder named "s3:"
        raise RefindexError("a single scan writes a local index file; to write indexes into object storage "
                            "use refindex batch SOURCE -o URL (run_batch(..., output=URL)), or upload the file",
                            file=os.fspath(output))
    formats.check_writable(urls.split(os.fspath(output))[1])  # before the scan: no work spent in vain
    if format == "parquet":
        if options.follow_external or options.isolate:
            raise RefindexError("follow_external and isolate are not supported with parquet output",
                                file=os.fspath(source))
        tree = scan_tree(source, options, stats=stats, progress=progress)
        fmt = output_format(options)
        safety.check_publishable(fmt.head_refs(tree), options.storage_options, file=tree.url)
        summary = fmt.write_parquet(tree, output, record_size=record_size or formats.DEFAULT_RECORD_SIZE)
        return WriteSummary(format="parquet", skipped=list(tree.skipped), arrays=len(tree.arrays),
                            source=dict(tree.provenance["source"]), **summary)
    if keep_refs or options.follow_external or options.isolate:
        refs = scan_refs(source, options, stats=stats, progress=progress)
        if options.follow_external:
            write_external(refs, output)
        formats.write_json(refs, output)
        summary = summary_of(refs, output)
        if keep_refs:
            summary["refs"] = refs
        return summary
    tree, fmt = scan_tree(source, options, stats=stats, progress=progress), output_format(options)
    head = fmt.head_refs(tree)
    safety.check_publishable(head, options.storage_options, file=tree.url)
    written = fmt.write_json(tree, output, head=head)
    return WriteSummary(**written, arrays=len(tree.arrays), source=dict(tree.provenance["source"]))


def summary_of(refs: RefsDocument, output: str | os.PathLike) -> WriteSummary:
    """What :func:`refindex.formats.write_json_stream` returns, for an index written from its dict."""
    r = refs.get("refs", {})
    prov = refs.get("refindex") or {}
    fmt = formats.of_refs(refs)
    meta, arrays = fmt.documents_in(r)
    inline = sum(1 for k, v in r.items() if isinstance(v, str) and k not in meta)
    chunks = sum(1 for v in r.values() if isinstance(v, list))
    summary = WriteSummary(format="json", keys=len(r), chunks_referenced=chunks, inline_chunks=inline,
                           bytes=os.path.getsize(output), skipped=list(prov.get("skipped", [])), arrays=arrays,
                           source=dict(prov.get("source") or {}))
    summary.update(fmt.summary_fields)
    return summary


def write_external(refs: RefsDocument, output: str | os.PathLike) -> None:
    """Move embedded indexes of linked files into files beside ``output``; record their names."""
    folder = os.path.dirname(os.path.abspath(os.fspath(output)))
    used = {os.path.basename(os.fspath(output))}

    def walk(r: RefsDocument) -> None:
        for source, entry in (r.get("refindex", {}).get("external") or {}).items():
            sub = entry.pop("refs", None)
            if sub is None:
                continue
            walk(sub)
            base = os.path.basename(source.rstrip("/")) or "external"
            name, i = base + ".refs.json", 1
            while name in used:
                i += 1
                name = f"{base}.{i}.refs.json"
            used.add(name)
            formats.write_json(sub, os.path.join(folder, name))
            entry["index"] = name  # relative to the folder of the index that names it

    walk(refs)


# ---------------------------------------------------------------------- Icechunk
def icechunk_tree(source: str | os.PathLike, options: ScanOptions, *, stats: dict[str, Any] | None = None,
                  progress: ProgressSetting = None) -> Tree:
    """The Tree an Icechunk repository receives: scanned as for a zarr v3 index (in a worker process
    with ``options.isolate``), its attributes strict JSON, through the safety gate."""
    if options.follow_external:
        raise RefindexError("follow_external is not supported with Icechunk output (index the linked files "
                            "into groups of their own)", file=os.fspath(source))
    options = options.but(zarr_format=3)
    if options.isolate:
        return in_worker(icechunk_tree_job, source, options, stats)
    tree = scan_tree(source, options, stats=stats, progress=progress)
    check_strict_attributes(tree, options, tree.url)
    safety.check_publishable(output_format(options).head_refs(tree), options.storage_options, file=tree.url)
    return tree


def icechunk_tree_job(source: str, options: ScanOptions) -> tuple[Tree, dict[str, Any]]:
    """:func:`icechunk_tree` as a worker job: the Tree and the scan's stats."""
    stats: dict[str, Any] = {}
    return icechunk_tree(source, options.but(isolate=False), stats=stats), stats


def check_strict_attributes(tree: Tree, options: ScanOptions, file: str) -> None:
    """Icechunk holds strict JSON only: an attribute with NaN or an infinity fails naming the node and
    the attribute, or (``on_unsupported="skip"``) is left out and recorded in ``skipped``."""
    nodes = [(p, g.attrs) for p, g in tree.groups.items()] + [(p, a.attrs) for p, a in tree.arrays.items()]
    for path, attrs in nodes:
        for name in formats.icechunk.non_finite_attributes({"attributes": attrs}):
            reason = (f"attribute {name!r} holds NaN or an infinity, which an Icechunk repository cannot store "
                      "(its metadata is strict JSON)")
            if options.on_unsupported != "skip":
                raise UnsupportedError(reason, file=file, path=path)
            attrs.pop(name)
            tree.skipped.append({"path": path, "attribute": name, "reason": reason})


def write_icechunk_index(source: str | os.PathLike, target: "formats.icechunk.IcechunkTarget", options: ScanOptions,
                         *, stats: dict[str, Any] | None = None,
                         progress: ProgressSetting = None) -> WriteSummary:
    """Scan ``source`` and commit its index into the Icechunk repository ``target`` (one commit;
    a failed scan or write commits nothing).  The sources are read with ``options.storage_options``."""
    tree = icechunk_tree(source, options, stats=stats, progress=progress)
    if target.source_options is None:
        target = replace(target, source_options=dict(options.storage_options))
    return WriteSummary(**formats.icechunk.write_icechunk(tree, target, version=__version__))
