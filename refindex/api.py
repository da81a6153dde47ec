"""The main job: scan an HDF5 file into a reference index, and summarise indexes."""

from __future__ import annotations

import os
from typing import Any, Literal

from . import conventions, writers
from .errors import RefindexError
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
    inline_max: int | None = None,
    contiguous_chunk_bytes: int | None | Literal["default"] = "default",
    on_unsupported: Literal["error", "skip"] = "error",
    cache: CacheOptions | None = None,
    stats: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Index one HDF5 file; returns the ReferenceFileSystem dict (version 1).

    ``source``: local path or fsspec URL (``s3://``, ``https://``, ``gs://``...).
    ``url``: what the chunk references should point at (default: ``source``; use it to
    index a local copy of a file published elsewhere).  ``storage_options`` go to
    fsspec for reading the source; they are never written into the index.
    ``stats``: if given, filled with request/byte counts and timings.
    """
    opts = ScanOptions(on_unsupported=on_unsupported)
    if inline_threshold is not None:
        opts.inline_threshold = int(inline_threshold)
    if inline_max is not None:
        opts.inline_max = int(inline_max)
    if contiguous_chunk_bytes != "default":
        opts.contiguous_chunk_bytes = contiguous_chunk_bytes or None
    with open_source(source, storage_options, cache) as src:
        target = url or src.url
        scanner = Scanner(src.h5, target, src.size, opts, label=src.url, reader=src.read_bytes)
        try:
            tree = scanner.run()
        except RefindexError:
            raise
        except Exception as e:  # libhdf5 errors on damaged files surface as OSError/KeyError/...
            raise RefindexError(f"{type(e).__name__}: {e}", file=src.url) from e
        chosen = conventions.apply(tree, convention)
        tree.provenance.update(
            {
                "refindex_version": __version__,
                "source": {"url": target, **src.info},
                "convention": chosen,
                "options": opts.as_dict(),
            }
        )
        # Timing varies run to run: report it in stats, keep it out of the (deterministic) index.
        seconds = tree.provenance.pop("scan_seconds", None)
        if stats is not None:
            stats.update(src.stats.as_dict())
            stats["scan_seconds"] = seconds
    return writers.to_refs(tree)


def scan_to_file(source: str | os.PathLike, output: str | os.PathLike, **kwargs: Any) -> dict[str, Any]:
    """Scan ``source`` and write the index to ``output`` atomically; returns the refs."""
    refs = scan(source, **kwargs)
    writers.write_json(refs, output)
    return refs


def info(refs: Any) -> dict[str, Any]:
    """Summary of an index: groups, arrays, chunks referenced, inline bytes, source files."""
    from .reader import load_refs

    r = load_refs(refs)
    if not isinstance(r, dict):
        raise RefindexError("info needs a JSON index", file=str(refs))
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
            inline_bytes += len(value)
    prov = r.get("refindex", {})
    return {
        "groups": groups,
        "arrays": arrays,
        "chunks_referenced": chunks,
        "bytes_referenced": referenced,
        "inline_chunks": inline_keys,
        "inline_bytes": inline_bytes,
        "sources": sorted((r.get("templates") or {}).values()),
        "convention": prov.get("convention"),
        "skipped": prov.get("skipped", []),
    }
