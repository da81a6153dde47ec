"""The main job: scan an HDF5 file into a reference index, and summarise indexes."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal

from . import conventions, safety, writers
from .errors import RefindexError
from .progress import ScanProgress
from .scan import ScanOptions, Scanner
from .source import CacheOptions, open_source

__version__ = "0.1.0"


def scan(
    source: str | os.PathLike,
    *,
    url: str | None = None,
    storage_options: dict[str, Any] | None = None,
    convention: conventions.Convention = "auto",
    inline_threshold: int | None = None,
    inline_dataset_threshold: int | None = None,
    inline_max: int | None = None,
    contiguous_chunk_bytes: int | None | Literal["default"] = "default",
    on_unsupported: Literal["error", "skip"] = "error",
    cache: CacheOptions | None = None,
    stats: dict[str, Any] | None = None,
    follow_external: bool = False,
    allowed_root: str | None = None,
    allow_outside: bool = False,
    max_inline_total: int | None | Literal["default"] = "default",
    isolate: bool = False,
    timeout: float | None = None,
    sink: Callable[[Any], Any] | None = None,
    progress: bool | Any = False,
    check_sample: bool | None = None,
) -> dict[str, Any]:
    """Index one HDF5 file; returns the ReferenceFileSystem dict (version 1).

    ``source``: local path or fsspec URL (``s3://``, ``https://``, ``gs://``...).
    ``url``: what the chunk references should point at (default: ``source``; use it to
    index a local copy of a file published elsewhere).  ``storage_options`` go to
    fsspec for reading the source; they are never written into the index.
    ``stats``: if given, filled with request/byte counts and timings.
    ``follow_external``: also index the files that external links point into; their
    indexes are embedded under ``refs["refindex"]["external"][source]["refs"]``
    (``scan_to_file`` writes them as files of their own instead), keyed by the ``source``
    the ``zarr_link`` entries carry.  ``refindex.open_nwb`` resolves links through them.
    ``allowed_root`` / ``allow_outside``: where other files (external links, external raw
    storage) may live; default: the scanned file's folder.  ``max_inline_total``: most
    inline bytes in the whole index (default 256 MiB).  ``isolate``: run libhdf5 in a
    worker process killed after ``timeout`` seconds, so a hostile file cannot crash or
    hang the caller (see :mod:`refindex.isolate`).
    ``sink``: called with the scanned :class:`~refindex.model.Tree` instead of building the
    refs dict (streamed writers such as :mod:`refindex.parquet`); ``scan`` returns its result.
    ``check_sample``: compare a sample of chunks with libhdf5's own reads (None: local
    files only, since remotely each sampled chunk is a request).
    ``progress``: True draws a progress bar on stderr (datasets done, chunks listed), or
    pass an object with the methods of :class:`refindex.progress.Progress`.
    """
    kwargs = dict(storage_options=storage_options, convention=convention, inline_threshold=inline_threshold,
                  inline_dataset_threshold=inline_dataset_threshold, inline_max=inline_max, contiguous_chunk_bytes=contiguous_chunk_bytes,
                  on_unsupported=on_unsupported, cache=cache, allowed_root=allowed_root,
                  allow_outside=allow_outside, max_inline_total=max_inline_total, check_sample=check_sample)
    if isolate:
        from .isolate import scan_isolated

        return scan_isolated(source, timeout=timeout, url=url, stats=stats, follow_external=follow_external,
                             **kwargs)
    opts = ScanOptions(on_unsupported=on_unsupported, allowed_root=allowed_root, allow_outside=allow_outside,
                       check_sample=check_sample)
    if max_inline_total != "default":
        opts.max_inline_total = max_inline_total
    if inline_threshold is not None:
        opts.inline_threshold = int(inline_threshold)
    if inline_dataset_threshold is not None:
        opts.inline_dataset_threshold = int(inline_dataset_threshold)
    if inline_max is not None:
        opts.inline_max = int(inline_max)
    if contiguous_chunk_bytes != "default":
        opts.contiguous_chunk_bytes = contiguous_chunk_bytes or None
    with open_source(source, storage_options, cache) as src:
        target = safety.strip_credentials(url or src.url)
        safety.check_target_url(target, explicit=url is not None)
        bar = ScanProgress(src.url) if progress is True else (progress or None)
        scanner = Scanner(src.h5, target, src.size, opts, label=src.url, read_many=src.read_many, fs_for=src.fs_for,
                          progress=bar)
        try:
            tree = scanner.run()
        except RefindexError:
            raise
        except Exception as e:  # libhdf5 errors on damaged files surface as OSError/KeyError/...
            raise RefindexError(f"{type(e).__name__}: {e}", file=src.url) from e
        finally:
            if bar is not None:
                bar.close()
        chosen = conventions.apply(tree, convention)
        safety.check_inline_total(tree, opts.max_inline_total, file=src.url)
        # size/etag/mtime describe the bytes scanned; when refs point elsewhere (a published
        # copy), only the size is known to hold for the target too.
        described = src.info if target == src.url else {"size": src.info["size"]}
        tree.provenance.update(
            {
                "refindex_version": __version__,
                "source": {"url": target, **described},
                "convention": chosen,
                "options": opts.as_dict(),
            }
        )
        # Timing varies run to run: report it in stats, keep it out of the (deterministic) index.
        seconds = tree.provenance.pop("scan_seconds", None)
        if stats is not None:
            stats.update(src.stats.as_dict())
            stats["scan_seconds"] = seconds
    if sink is not None:  # streamed writers (parquet) take the Tree itself: no dict of every chunk key
        return sink(tree)
    refs = writers.to_refs(tree)
    safety.check_codecs(refs, file=target)
    safety.check_no_secrets(refs, storage_options, file=target)
    if follow_external:
        if not allow_outside and allowed_root is None:  # linked files of linked files: same root
            kwargs["allowed_root"] = safety.folder_of(src.url)
        _follow_external(refs, src.url, target, kwargs, {src.url})
    return refs


def _follow_external(refs: dict[str, Any], read_url: str, chunk_url: str, kwargs: dict[str, Any],
                     seen: set[str]) -> None:
    """Index the files external links in ``refs`` point into (recursively, each file once)."""
    from .reader import beside, external_sources_of

    out: dict[str, Any] = {}
    for source in external_sources_of(refs):
        entry: dict[str, Any] = {"url": beside(chunk_url, source)}
        sub_read = beside(read_url, source)
        try:
            safety.resolve_inside(source, read_url, allowed_root=kwargs.get("allowed_root"),
                                  allow_outside=bool(kwargs.get("allow_outside")), what="externally linked file",
                                  file=read_url)
        except RefindexError as e:
            entry["error"] = str(e)
            out[source] = entry
            continue
        if sub_read in seen:
            entry["note"] = "indexed elsewhere in this index (link cycle)"
        else:
            seen.add(sub_read)
            try:
                entry["refs"] = scan(sub_read, url=entry["url"], **kwargs)
                _follow_external(entry["refs"], sub_read, entry["url"], kwargs, seen)
            except RefindexError as e:
                entry["error"] = str(e)
        out[source] = entry
    if out:
        refs.setdefault("refindex", {})["external"] = out


def scan_to_file(source: str | os.PathLike, output: str | os.PathLike, *, return_refs: bool = True,
                 **kwargs: Any) -> dict[str, Any]:
    """Scan ``source`` and write the index to ``output`` atomically; returns the refs.

    ``return_refs=False``: stream the JSON straight from the scanned chunk tables
    (:func:`refindex.writers.write_json_stream`; same text) and return only a summary
    (keys, chunks_referenced, inline_chunks, bytes, skipped): far less time and memory
    for millions of chunks, where the refs dict is the main cost.  ``follow_external``
    and ``isolate`` build the dict anyway (then it is written as before).
    ``format="parquet"``: write a parquet folder instead (see :func:`scan_to_parquet`,
    whose summary is returned).
    """
    fmt = kwargs.pop("format", "json")
    if fmt == "parquet":
        return scan_to_parquet(source, output, **kwargs)
    if fmt != "json":
        raise RefindexError(f"unknown output format {fmt!r} (json or parquet)", file=os.fspath(output))
    if not return_refs and not kwargs.get("follow_external") and not kwargs.get("isolate"):
        if kwargs.get("sink") is not None:
            raise RefindexError("sink is not supported by scan_to_file", file=os.fspath(source))
        return scan(source, sink=writers.make_json_sink(output, kwargs.get("storage_options")), **kwargs)
    refs = scan(source, **kwargs)
    if kwargs.get("follow_external"):
        _write_external(refs, output)
    writers.write_json(refs, output)
    return refs if return_refs else summary_of(refs, output)


def summary_of(refs: dict[str, Any], output: str | os.PathLike) -> dict[str, Any]:
    """What :func:`refindex.writers.write_json_stream` returns, for an index written from its dict."""
    r = refs.get("refs", {})
    inline = sum(1 for k, v in r.items() if isinstance(v, str) and not k.rsplit("/", 1)[-1].startswith("."))
    chunks = sum(1 for v in r.values() if isinstance(v, list))
    return {"format": "json", "keys": len(r), "chunks_referenced": chunks, "inline_chunks": inline,
            "bytes": os.path.getsize(output), "skipped": list(refs.get("refindex", {}).get("skipped", []))}


def scan_to_parquet(source: str | os.PathLike, output: str | os.PathLike, **kwargs: Any) -> dict[str, Any]:
    """Scan ``source`` into parquet refs (fsspec's LazyReferenceMapper layout) in the folder ``output``.

    Streamed from the chunk tables, so memory stays bounded for millions of chunks; the
    folder appears atomically.  ``record_size`` (default 100000) plus :func:`scan`'s
    keywords.  Returns a summary (records, chunks, bytes written).
    """
    from .parquet import scan_to_parquet as _scan_to_parquet

    return _scan_to_parquet(source, output, **kwargs)


def _write_external(refs: dict[str, Any], output: str | os.PathLike) -> None:
    """Move embedded indexes of linked files into files beside ``output``; record their names."""
    folder = os.path.dirname(os.path.abspath(os.fspath(output)))
    used = {os.path.basename(os.fspath(output))}

    def walk(r: dict[str, Any]) -> None:
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
            writers.write_json(sub, os.path.join(folder, name))
            entry["index"] = name  # relative to the folder of the index that names it

    walk(refs)


def info(refs: Any, *, storage_options: dict[str, Any] | None = None, cache: Any = True) -> dict[str, Any]:
    """Summary of an index (or of an HDF5 file's index, made on the fly): groups, arrays, chunks
    referenced, inline bytes, source files, and the options that decided what is inline."""
    from .inputs import load_index

    r, _ = load_index(refs, storage_options=storage_options, cache=cache)
    if not isinstance(r, dict):
        return _parquet_info(r)
    groups = arrays = chunks = inline_keys = inline_bytes = 0
    referenced = 0
    for key, value in r.get("refs", {}).items():
        base = key.rsplit("/", 1)[-1]
        if base == ".zgroup":
            groups += 1
        elif base == ".zarray":
            arrays += 1
        elif base.startswith("."):
            continue
        elif isinstance(value, list):
            chunks += 1
            referenced += int(value[2]) if len(value) > 2 else 0
        else:
            inline_keys += 1
            inline_bytes += _inline_size(value)
    return _summary(groups, arrays, chunks, referenced, inline_keys, inline_bytes, r.get("templates"),
                    r.get("refindex", {}))


def _summary(groups: int, arrays: int, chunks: int, referenced: int, inline_keys: int, inline_bytes: int,
             templates: dict[str, str] | None, prov: dict[str, Any]) -> dict[str, Any]:
    """The dict :func:`info` returns, for JSON and parquet indexes alike."""
    return {
        "groups": groups,
        "arrays": arrays,
        "chunks_referenced": chunks,
        "bytes_referenced": referenced,
        "inline_chunks": inline_keys,
        "inline_bytes": inline_bytes,
        "sources": sorted((templates or {}).values()),
        "convention": prov.get("convention"),
        "inline_options": {k: (prov.get("options") or {}).get(k)
                           for k in ("inline_threshold", "inline_dataset_threshold", "inline_max")},
        "skipped": prov.get("skipped", []),
    }


def _inline_size(value: str) -> int:
    """Bytes an inline value stands for ("base64:..." text decodes; other text is UTF-8)."""
    if value.startswith("base64:"):
        b64 = value[7:]
        return len(b64) * 3 // 4 - b64[-2:].count("=")
    return len(value.encode("utf-8"))


def _parquet_info(folder: str) -> dict[str, Any]:
    """``info`` of a parquet index: metadata from ``.zmetadata``, counts from the record files."""
    import json

    import fsspec
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    fs, root = fsspec.core.url_to_fs(folder)
    try:
        doc = json.loads(fs.cat_file(root.rstrip("/") + "/.zmetadata"))
    except FileNotFoundError as e:
        raise RefindexError("not an index: no .zmetadata", file=folder) from e
    meta = doc.get("metadata", {})
    groups = sum(k.rsplit("/", 1)[-1] == ".zgroup" for k in meta)
    arrays = [k[: -len(".zarray")].rstrip("/") for k in meta if k.rsplit("/", 1)[-1] == ".zarray"]
    chunks = inline_keys = inline_bytes = referenced = 0
    for array in arrays:
        base = root.rstrip("/") + "/" + array if array else root.rstrip("/")
        for path in sorted(fs.glob(base + "/refs.*.parq")):
            with fs.open(path, "rb") as fh:
                table = pq.read_table(fh, columns=["path", "size", "raw"])
            has_path = pc.is_valid(table["path"])
            chunks += pc.sum(has_path).as_py() or 0
            referenced += pc.sum(pc.if_else(has_path, table["size"], 0)).as_py() or 0
            raw_valid = pc.is_valid(table["raw"])
            inline_keys += pc.sum(raw_valid).as_py() or 0
            inline_bytes += pc.sum(pc.binary_length(pc.drop_null(table["raw"]))).as_py() or 0
    prov = doc.get("refindex", {})
    return _summary(groups, len(arrays), chunks, referenced, inline_keys, inline_bytes, prov.get("templates"),
                    prov) | {"format": "parquet"}

