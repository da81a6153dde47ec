"""Read side: open an index as a read-only zarr group (or an NWB file).

zarr-python 3 needs an asynchronous ReferenceFileSystem, and remote targets need
their own filesystem created asynchronous too; this module hides that friction.
"""

from __future__ import annotations

import json
import os
from typing import Any

import fsspec

from .errors import RefindexError, SourceError


def load_refs(refs: Any, storage_options: dict[str, Any] | None = None) -> Any:
    """A refs dict from a dict, a JSON file/URL, or a parquet directory (returned as its path)."""
    if isinstance(refs, dict):
        return refs
    path = os.fspath(refs)
    fs, p = fsspec.core.url_to_fs(path, **(storage_options or {}))
    try:
        if fs.isdir(p):
            return path  # parquet refs: fsspec's LazyReferenceMapper layout
        with fs.open(p, "rb") as fh:
            return json.loads(fh.read())
    except FileNotFoundError as e:
        raise SourceError("index not found", file=path) from e
    except json.JSONDecodeError as e:
        raise RefindexError(f"not a JSON reference index: {e}", file=path) from e


def _target_protocol(refs: Any) -> str | None:
    if not isinstance(refs, dict):
        return None
    for url in (refs.get("templates") or {}).values():
        return fsspec.core.split_protocol(url)[0] or "file"
    return None


def reference_fs(
    refs: Any,
    *,
    remote_protocol: str | None = None,
    remote_options: dict[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
):
    """An asynchronous ReferenceFileSystem over ``refs`` as zarr 3 needs it."""
    refs = load_refs(refs, storage_options)
    protocol = remote_protocol or _target_protocol(refs)
    kwargs: dict[str, Any] = {"fo": refs, "asynchronous": True}
    if protocol and protocol not in ("file", "local"):
        kwargs["remote_protocol"] = protocol
        kwargs["remote_options"] = {**(remote_options or {}), "asynchronous": True}
    elif remote_options:
        kwargs["remote_options"] = remote_options
    if not isinstance(refs, dict):
        kwargs["target_options"] = storage_options or {}
    return fsspec.filesystem("reference", **kwargs)


def store(refs: Any, **kwargs: Any):
    """A read-only ``zarr.storage.FsspecStore`` over the index."""
    import zarr

    from .codecs import register_codecs

    register_codecs()
    return zarr.storage.FsspecStore(reference_fs(refs, **kwargs), read_only=True, path="")


def open(refs: Any, **kwargs: Any):
    """Open an index (dict, JSON path/URL or parquet directory) as a read-only ``zarr.Group``.

    Keyword arguments: ``remote_protocol``, ``remote_options`` (for the files the chunks
    live in, e.g. ``{"anon": True}`` or an ``endpoint_url``), ``storage_options`` (for
    reading the index itself).
    """
    import zarr

    return zarr.open_group(store(refs, **kwargs), mode="r", zarr_format=2)


def open_nwb(refs: Any, **kwargs: Any):
    """Lazily read an NWB file through its index with hdmf-zarr's ``NWBZarrV2IO``.

    Returns the ``NWBFile``; arrays stay lazy (read on access).  The IO object is kept
    on the returned file as ``nwbfile.refindex_io`` so it is not garbage collected.
    """
    from hdmf_zarr.nwb_zarrv2 import NWBZarrV2IO

    io = NWBZarrV2IO(path=store(refs, **kwargs), mode="r")
    nwbfile = io.read()
    try:
        nwbfile.refindex_io = io
    except Exception:  # pragma: no cover - containers may refuse new attributes
        pass
    return nwbfile
