"""Read side: open an index as a read-only zarr group (or an NWB file).

zarr-python 3 needs an asynchronous ReferenceFileSystem, and remote targets need
their own filesystem created asynchronous too; this module hides that friction.
"""

from __future__ import annotations

import json
import os
from typing import Any

import fsspec
import numpy as np

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


def _target_protocol(refs: Any, storage_options: dict[str, Any] | None = None) -> str | None:
    if not isinstance(refs, dict):  # parquet folder: templates are kept in its .zmetadata
        from .parquet import read_metadata

        refs = read_metadata(refs, storage_options).get("refindex") or {}
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
    protocol = remote_protocol or _target_protocol(refs, storage_options)
    kwargs: dict[str, Any] = {"fo": refs, "asynchronous": True}
    if protocol and protocol not in ("file", "local"):
        kwargs["remote_protocol"] = protocol
        kwargs["remote_options"] = {**(remote_options or {}), "asynchronous": True}
    elif remote_options:
        kwargs["remote_options"] = remote_options
    if not isinstance(refs, dict):
        kwargs["target_options"] = storage_options or {}
        # else fsspec scans the lazy (parquet) references for a URL to guess the protocol
        kwargs.setdefault("remote_protocol", protocol or "file")
    return fsspec.filesystem("reference", **kwargs)


def store(refs: Any, **kwargs: Any):
    """A read-only ``zarr.storage.FsspecStore`` over the index."""
    import zarr

    from .codecs import register_codecs

    register_codecs()
    return zarr.storage.FsspecStore(reference_fs(refs, **kwargs), read_only=True, path="")


def open(refs: Any, *, check_source: bool = True, **kwargs: Any):
    """Open an index (dict, JSON path/URL or parquet directory) as a read-only ``zarr.Group``.

    Keyword arguments: ``remote_protocol``, ``remote_options`` (for the files the chunks
    live in, e.g. ``{"anon": True}`` or an ``endpoint_url``), ``storage_options`` (for
    reading the index itself).  The hierarchy comes from the consolidated ``.zmetadata``
    alone (one read, however deep the file), or per node when an index has none.
    ``check_source``: refuse (``StaleIndexError``) when the source changed since indexing;
    one ``info`` call, skipped for indexes without provenance.
    """
    from .consolidated import open_group

    refs = load_refs(refs, kwargs.get("storage_options"))
    if check_source:
        from .provenance import check_source as _check

        _check(refs, storage_options=kwargs.get("remote_options"))
    return open_group(store(refs, **kwargs))


def external_sources_of(refs: dict[str, Any]) -> list[str]:
    """The other files (``source`` values other than ".") that links and attribute references name."""
    found: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            src = v.get("source")
            if isinstance(src, str) and src != "." and "path" in v:
                found.add(src)
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for key, value in (refs.get("refs") or {}).items():
        if key.rsplit("/", 1)[-1] == ".zattrs" and isinstance(value, str):
            walk(json.loads(value))
    return sorted(found)


def _rebase_self_refs(refs: dict[str, Any], source: str) -> dict[str, Any]:
    """A copy of ``refs`` whose in-file links/attribute references (``source: "."``) name ``source``.

    Objects read from a linked file are resolved by the IO of the file that links to them,
    so their own links must say which file they live in.  (References stored inside
    datasets of the linked file are left as they are.)
    """

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            out = {k: walk(x) for k, x in v.items()}
            if out.get("source") == "." and "path" in out:
                out["source"] = source
            return out
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    new = {}
    for key, value in refs["refs"].items():
        base = key.rsplit("/", 1)[-1]
        if base == ".zmetadata":
            continue  # stale after the rewrite; not needed
        if base == ".zattrs" and isinstance(value, str) and '"."' in value:
            value = json.dumps(walk(json.loads(value)), allow_nan=True)
        new[key] = value
    return {**refs, "refs": new}


def _labelled_store(fs, label: str):
    """A read-only FsspecStore whose ``str()`` names the file it indexes.

    hdmf-zarr keys the builders it has read by ``str(store)`` + path; an FsspecStore has
    no ``__str__`` (every one prints the same repr), so objects of two indexed files
    would be confused without a distinct label.
    """
    import zarr

    class RefsStore(zarr.storage.FsspecStore):
        def __str__(self) -> str:
            return label

    return RefsStore(fs, read_only=True, path="")


class ExternalIndexes:
    """Opens the indexes of files that external links point into, by link ``source``.

    Looks, in order, in the index's ``refindex.external`` section (embedded ``refs`` or an
    ``index`` file beside the index), in ``external`` (a dict source -> refs, JSON path or
    URL) and finally scans the HDF5 file next to the indexed file on the fly.
    """

    def __init__(self, refs: dict[str, Any], *, index_location: str | None = None,
                 external: dict[str, Any] | None = None, scan_missing: bool = True, **fs_kwargs: Any):
        self.refs = refs
        self.index_location = index_location
        self.external = external or {}
        self.scan_missing = scan_missing
        self.fs_kwargs = fs_kwargs
        self._refs_cache: dict[str, dict[str, Any]] = {}

    def _main_url(self) -> str | None:
        return (self.refs.get("templates") or {}).get("u")

    def refs_for(self, source: str) -> dict[str, Any]:
        if source in self._refs_cache:
            return self._refs_cache[source]
        from .api import _beside

        entry = ((self.refs.get("refindex") or {}).get("external") or {}).get(source) or {}
        if source in self.external:
            r = load_refs(self.external[source])
        elif "refs" in entry:
            r = entry["refs"]
        elif "index" in entry and self.index_location:
            r = load_refs(_beside(self.index_location, entry["index"]))
        elif self.scan_missing and (entry.get("url") or self._main_url()):
            from .api import scan

            r = scan(entry.get("url") or _beside(self._main_url(), source), convention="hdmf")
        else:
            raise SourceError(f"no index for the externally linked file {source!r}", file=source)
        if not isinstance(r, dict):
            raise RefindexError("externally linked indexes must be JSON indexes", file=source)
        r = _rebase_self_refs(r, source)
        self._refs_cache[source] = r
        return r

    def store(self, source: str):
        r = self.refs_for(source)
        label = "refindex:" + ((r.get("templates") or {}).get("u") or source)
        return _labelled_store(reference_fs(r, **self.fs_kwargs), label)


def nwb_io_class():
    """``NWBZarrV2IO`` subclass that also resolves links into other indexed files."""
    from hdmf_zarr.backend import ROOT_NAME
    from hdmf_zarr.nwb_zarrv2 import NWBZarrV2IO

    class RefsNWBZarrV2IO(NWBZarrV2IO):
        """``NWBZarrV2IO`` whose references with ``source`` other than "." open that file's index.

        hdmf-zarr 0.14 re-opens such a source relative to ``str(store)``, which cannot work for
        a store object (and would reuse the same refs for ``reference://`` paths).
        """

        refindex_external: ExternalIndexes | None = None

        def resolve_ref(self, zarr_ref):
            ref = zarr_ref
            if isinstance(ref, np.ndarray) and ref.ndim == 0:
                ref = ref[()]
            if isinstance(ref, str):
                try:
                    ref = json.loads(ref)
                except json.JSONDecodeError:
                    ref = None
            ext = self.refindex_external
            if ext is not None and isinstance(ref, dict) and ref.get("source") not in (None, "."):
                store = ext.store(ref["source"])
                root = self._open_file_consolidated(store=store, mode="r")
                path = ref.get("path")
                if not path or path == "/":
                    return ROOT_NAME, root
                try:
                    target = root[path]
                except Exception as e:
                    raise ValueError(f"Found bad link to object {path} in file {ref['source']}") from e
                return os.path.basename(path.rstrip("/")), target
            return super().resolve_ref(zarr_ref)

    return RefsNWBZarrV2IO


def open_nwb(refs: Any, *, external: dict[str, Any] | None = None, scan_missing: bool = True, **kwargs: Any):
    """Lazily read an NWB file through its index with hdmf-zarr's ``NWBZarrV2IO``.

    Returns the ``NWBFile``; arrays stay lazy (read on access).  The IO object is kept
    on the returned file as ``nwbfile.refindex_io`` so it is not garbage collected.

    External links (``zarr_link`` entries whose ``source`` is another file) are resolved
    through that file's index: embedded by ``scan(..., follow_external=True)``, written
    beside the index by ``scan_to_file``/``refindex scan --follow-external``, given in
    ``external`` (source -> refs dict or index path), or else (``scan_missing``) made on
    the fly from the HDF5 file next to the indexed file.
    """
    index_location = None if isinstance(refs, dict) else os.fspath(refs)
    loaded = load_refs(refs, kwargs.get("storage_options"))
    if kwargs.pop("check_source", True):
        from .provenance import check_source as _check

        _check(loaded, storage_options=kwargs.get("remote_options"))
    cls = nwb_io_class()
    io = cls(path=store(loaded, **kwargs), mode="r")
    if isinstance(loaded, dict):
        io.refindex_external = ExternalIndexes(loaded, index_location=index_location, external=external,
                                               scan_missing=scan_missing, **kwargs)
    nwbfile = io.read()
    try:
        nwbfile.refindex_io = io
    except Exception:  # pragma: no cover - containers may refuse new attributes
        pass
    return nwbfile
