"""What a user hands to ``open``, ``open_nwb``, ``info`` or ``schema``: an index, or the HDF5 file itself.

An index (JSON file, parquet folder, or a dict) is read as it is.  An HDF5 file or URL
is scanned on the fly, and the index kept in a local cache keyed by the file's URL,
size and etag/mtime (one ``info`` call), so opening it again in a later session costs
that freshness check instead of a scan.  Anything else is refused with an error that
says what it is.

The cache lives in ``$REFINDEX_CACHE_DIR``, else ``$XDG_CACHE_HOME/refindex``, else
``~/.cache/refindex``; ``REFINDEX_CACHE_DIR=off`` or ``cache=False`` turns it off.
Entries are whole JSON indexes written atomically; deleting the folder is always safe.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

import fsspec

from .errors import RefindexError, SourceError

Kind = Literal["json", "parquet", "hdf5"]
HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5", ".nwb", ".nc", ".nc4", ".h5ad")
CacheSetting = bool | str | os.PathLike | None


def kind_of(target: str, storage_options: dict[str, Any] | None = None) -> Kind:
    """Is ``target`` a JSON index, a parquet index folder or an HDF5 file?

    Decided by the name where it says (``.json``, ``.nwb``, ``.h5``...), else by the first
    bytes (one small read); a folder is a parquet index when it holds ``.zmetadata``.
    """
    from .source import describe, has_hdf5_signature

    name = target.split("?", 1)[0].rstrip("/").lower()
    if name.endswith(".json"):
        return "json"
    if name.endswith(".parq") or target.endswith("/"):
        return "parquet"
    if name.endswith(HDF5_SUFFIXES):
        return "hdf5"
    try:
        fs, path = fsspec.core.url_to_fs(target, **(storage_options or {}))
    except Exception as e:
        raise SourceError(f"cannot open filesystem: {e}", file=target) from e
    try:
        if "://" not in target or target.startswith("file://"):
            if os.path.isdir(path):
                if os.path.exists(os.path.join(path, ".zmetadata")):
                    return "parquet"
                raise RefindexError("a folder that is not a parquet index (no .zmetadata)", file=target)
        head = fs.cat_file(path, start=0, end=64)
    except FileNotFoundError as e:
        if _exists(fs, path.rstrip("/") + "/.zmetadata"):
            return "parquet"
        raise SourceError("file not found", file=target) from e
    except IsADirectoryError:
        return "parquet"
    if head.lstrip()[:1] == b"{":
        return "json"
    if head[:8] == b"\x89HDF\r\n\x1a\n":
        return "hdf5"
    size = fs.size(path)
    if has_hdf5_signature(lambda off, n: head[off:off + n] if off + n <= len(head) else fs.cat_file(
            path, start=off, end=off + n), size):
        return "hdf5"
    raise RefindexError(f"neither a reference index (JSON or parquet) nor an HDF5 file: {describe(head)}",
                        file=target)


def _exists(fs: Any, path: str) -> bool:
    try:
        return bool(fs.exists(path))
    except Exception:
        return False


def cache_folder(cache: CacheSetting = True) -> Path | None:
    """Where indexes made on the fly are kept (None: not kept)."""
    if cache is False or cache is None:
        return None
    if cache is not True:
        return Path(os.fspath(cache))
    env = os.environ.get("REFINDEX_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("off", "0", "no", "false", "") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "refindex"


def index_of_file(url: str, *, storage_options: dict[str, Any] | None = None, cache: CacheSetting = True,
                  **scan_kwargs: Any) -> dict[str, Any]:
    """The index of the HDF5 file ``url``: from the cache when the file is unchanged, else scanned now.

    The cache key is the file's URL, size and etag/mtime (one ``info`` call), refindex's
    version and ``scan_kwargs``; a changed file simply misses.
    """
    from .api import __version__, scan
    from .provenance import current_info
    from .writers import write_json

    folder = cache_folder(cache)
    if folder is None:
        return scan(url, storage_options=storage_options, **scan_kwargs)
    where = url if "://" in url and not url.startswith("file://") else os.path.abspath(url.removeprefix("file://"))
    now = current_info(where, storage_options)
    material = json.dumps({"url": where, "source": now, "refindex": __version__, "options": scan_kwargs},
                          sort_keys=True, default=repr)
    entry = folder / (hashlib.sha256(material.encode()).hexdigest()[:40] + ".refs.json")
    if entry.exists():
        try:
            refs = json.loads(entry.read_bytes())
            if (refs.get("refindex") or {}).get("source", {}).get("size") == now.get("size"):
                return refs
        except (OSError, ValueError):
            pass  # a damaged entry is scanned again and replaced
    refs = scan(where, storage_options=storage_options, **scan_kwargs)
    try:
        write_json(refs, entry)
    except OSError:  # a read-only or full cache never stops the read
        pass
    return refs


def load_index(target: Any, *, storage_options: dict[str, Any] | None = None, cache: CacheSetting = True,
               **scan_kwargs: Any) -> tuple[Any, bool]:
    """(index, fresh): a refs dict or a parquet folder path; ``fresh`` when it was just made or
    checked against its source (so the caller need not check again)."""
    from .reader import load_refs

    if isinstance(target, dict):
        return target, False
    target = os.fspath(target)
    kind = kind_of(target, storage_options)
    if kind == "hdf5":
        return index_of_file(target, storage_options=storage_options, cache=cache, **scan_kwargs), True
    return load_refs(target, storage_options), False
