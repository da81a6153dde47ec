"""``open_nwb``: an NWB file through an index or from the file itself, on the road that reads it exactly.

The h5py road (pynwb's ``NWBHDF5IO`` over :func:`refindex.h5py_file`) or the zarr road
(hdmf-zarr's IO classes of :mod:`._io` over the index), chosen by ``reader``; an Icechunk
repository is read through hdmf-zarr's ``NWBZarrIO``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any, Literal

from ...errors import RefindexError
from ...isolation.gcpause import held_for_open
from ._attrtypes import provenance_of, recorded_types
from ..index._load import zarr_format_of
from ..zarr_store._open import ReadOptions, SourceCheck, declared_of, index_location, prepare_unchecked, store_of
from ..zarr_store._store import IndexStore
from ._external import ExternalIndexes
from ._io import nwb_io_class, nwb_io_class_v3
from ._readahead import first_acquisition_chunks

Reader = Literal["auto", "h5py", "zarr"]
READERS = ("auto", "h5py", "zarr")
DEFAULT_READER: Reader = "auto"  # chosen by exactness across writers, then speed (docs/h5py.md)
READ_AHEAD_BYTES = 8 << 20  # the first chunk of the main recording, fetched while the NWBFile is built


def _h5py_road(refs: Any, reader: Reader, **options: Any) -> tuple[Any, Any]:
    """(the index of ``refs`` prepared, the ``h5py.File`` over it or None when ``reader`` says the zarr road
    takes it: "auto" and links into other files).  Collection is held while it opens (the open's
    objects live as long as the file, refindex.isolation.gcpause); pynwb's read after it is not held.
    ``options``: :func:`~refindex.read.h5py_road.prepared`'s (``fetched`` among them)."""
    from ..h5py_road import Road, on_the_fly, open_road, prepared, uncached_remote_hdf5

    with held_for_open():
        if options.get("fetched") is None and uncached_remote_hdf5(refs, options["cache"]):
            made = on_the_fly(refs, storage_options=options["storage_options"], cache=options["cache"],
                              remote_options=options["remote_options"], accept=require_nwb,
                              accept_file=partial(require_nwb_file, label=refs), links_out=reader == "h5py")
            if isinstance(made, Road):  # opened over the bytes the scan fetched (no index yet)
                return None, open_road(made)
            prep = made
        else:
            prep = prepared(refs, **options, accept=require_nwb)
        require_nwb({"refindex": prep.prov} if prep.loaded is None
                    else declared_of(prep.loaded, prep.read_options), prep.label)
        return prep, (open_road(prep.road()) if reader == "h5py" or not prep.external_links else None)


def open_nwb(refs: Any, *, external: dict[str, Any] | None = None, scan_missing: bool = True,
             storage_options: dict[str, Any] | None = None, remote_options: dict[str, Any] | None = None,
             remote_protocol: str | None = None, check_source: bool = True, cache: Any = True,
             allowed_urls: Sequence[str] | None = None, trust: bool = False, group: str | None = None,
             branch: str | None = None, snapshot: str | None = None, read_ahead: int = READ_AHEAD_BYTES,
             reader: Reader = DEFAULT_READER) -> Any:
    """Lazily read an NWB file through its index or from the file itself: with pynwb's ``NWBHDF5IO`` over
    :func:`refindex.h5py_file` (``reader="h5py"``), or with hdmf-zarr's ``NWBZarrV2IO`` (a zarr v3
    index: ``NWBZarrIO``; ``reader="zarr"``).

    ``refs``: an index (dict, JSON path/URL, parquet folder) or the NWB file (local path or
    URL: indexed on the fly, the index kept in the local ``cache``, see :mod:`refindex.read`).
    Returns the ``NWBFile``; arrays stay lazy (read on access).  The IO object is kept
    on the returned file as ``nwbfile.refindex_io`` so it is not garbage collected.
    Other keywords as for :func:`refindex.open`.

    External links (``zarr_link``/``_LINKS`` entries whose ``source`` is another file) are resolved
    through that file's index: embedded by ``scan(..., follow_external=True)``, written
    beside the index by ``scan_to_file``/``refindex scan --follow-external``, given in
    ``external`` (source -> refs dict or index path), or else (``scan_missing``) made on
    the fly from the HDF5 file next to the indexed file.

    URLs are judged as by :func:`refindex.open` (``allowed_urls``, ``trust``): the index's
    own at open, those of a linked file's index when a link first leads into it, before
    anything of it is read.

    ``read_ahead``: the most bytes to fetch in the background, while the NWBFile is built,
    of the first chunk of the main recording in a remote file (the acquisition series with
    the longest time axis: what a notebook plots first, so its round trip costs no wait).
    0 turns it off.

    An Icechunk repository (``group``, ``branch``, ``snapshot`` as for :func:`refindex.open`)
    is read through hdmf-zarr's ``NWBZarrIO`` over its read-only session's store.

    Attributes whose type JSON cannot carry (``uint64``, ``float32``, arrays) get the type the
    scan recorded (:mod:`refindex.read.nwb._attrtypes`) before the containers are made on the zarr
    road, as ``NWBHDF5IO`` hands them over: files hdmf-zarr alone cannot build (an unsigned
    attribute a constructor checks) open here.

    ``reader``: ``"h5py"`` reads exactly what pynwb reads from the file, whatever wrote it
    (libhdf5 reads the file's own bytes, its metadata from the index's pages); ``external``,
    ``scan_missing``, ``remote_protocol`` and ``read_ahead`` do not apply to it, and it cannot
    follow external links (h5py's file-object driver).  ``"zarr"`` reads the zarr form of the
    index.  ``"auto"`` (the default; docs/h5py.md has the numbers behind it): the h5py road,
    unless the file links into other files.

    A file that is not an NWB file is refused before anything is read or cached.
    """
    if reader not in READERS:
        raise ValueError(f"reader must be one of {', '.join(map(repr, READERS))}, not {reader!r}")
    options = ReadOptions.of(storage_options=storage_options, remote_options=remote_options,
                             remote_protocol=remote_protocol, check_source=check_source, cache=cache,
                             allowed_urls=allowed_urls, trust=trust)
    from ..h5py_road import SourceAsk, requested_early

    asked = SourceAsk(remote_options, allowed_urls, trust) if check_source else None
    with requested_early(refs, storage_options, options.cache, asked) as fetched:  # as h5py_file: sent before the rest loads
        if reader != "zarr":
            from pynwb import NWBHDF5IO

            prep, road = _h5py_road(refs, reader, storage_options=storage_options, remote_options=remote_options,
                                    check_source=check_source, cache=options.cache, allowed_urls=allowed_urls,
                                    trust=trust, group=group, branch=branch, snapshot=snapshot, fetched=fetched)
            if road is not None:
                return _read_kept(NWBHDF5IO(file=road, mode="r"))
            # "auto" and links into other files: the zarr road follows them through the linked files' indexes
            if prep.icechunk is not None:
                return _read_icechunk(prep.icechunk, options, external, scan_missing)
            loaded, opts, check = prep.loaded, replace(prep.read_options, remote_protocol=remote_protocol), prep.check
        else:
            from ..zarr_store._open import opened_icechunk

            ic = opened_icechunk(refs, storage_options=storage_options, remote_options=remote_options, group=group,
                                 branch=branch, snapshot=snapshot, check_source=check_source)
            if ic is not None:
                return _read_icechunk(ic, options, external, scan_missing)
            loaded, opts, check = prepare_unchecked(refs, options, accept=require_nwb, fetched=fetched)
            require_nwb(declared_of(loaded, opts), index_location(refs))
        return _read_zarr_road(refs, loaded, opts, check, read_ahead=read_ahead, trust=trust, external=external,
                               scan_missing=scan_missing)


def _read_zarr_road(refs: Any, loaded: Any, opts: ReadOptions, check: SourceCheck, *, read_ahead: int,
                    trust: bool, external: dict[str, Any] | None, scan_missing: bool) -> Any:
    """hdmf-zarr over a JSON or parquet index: the first chunks read ahead while the source is checked."""
    store = store_of(loaded, opts)
    if read_ahead > 0 and isinstance(store, IndexStore):  # under way while the source is checked
        store.read_ahead(*first_acquisition_chunks(store, read_ahead))
    try:
        check()
    except BaseException:
        if isinstance(store, IndexStore):
            store.drop_read_ahead()
        raise
    io_class = nwb_io_class_v3() if zarr_format_of(loaded, opts.storage_options) == 3 else nwb_io_class()
    io = io_class(path=store, mode="r")
    io.refindex_attribute_types = recorded_types(provenance_of(loaded, store))
    if isinstance(loaded, dict):  # the linked files are judged afresh (the main index may be trusted now)
        io.refindex_external = ExternalIndexes(loaded, replace(opts, trust=trust), index_location=index_location(refs),
                                               external=external, scan_missing=scan_missing)
    return _read_kept(io)


NOT_NWB = ("not an NWB file: its root group has no neurodata_type or namespace attribute (every NWB file has them); "
           "read it with refindex.open (zarr) or xarray instead")


def require_nwb(refs: Any, label: str | None = None) -> None:
    """Refuse (before anything is read or cached) an index whose file is no NWB file: its root
    group has none of the attributes every NWB file has (``neurodata_type``, ``namespace``)."""
    if not isinstance(refs, dict):
        return
    prov = refs.get("refindex") or {}
    if prov.get("convention") in ("hdmf", "hdmf3"):
        return
    body = refs.get("refs") if "version" in refs else refs
    attrs: Any = {}
    try:
        if isinstance(body, dict) and ".zattrs" in body:
            attrs = json.loads(body[".zattrs"])
        elif isinstance(body, dict) and "zarr.json" in body:
            doc = body["zarr.json"]
            attrs = (json.loads(doc) if isinstance(doc, (str, bytes)) else doc).get("attributes") or {}
    except (ValueError, TypeError, AttributeError):
        attrs = {}
    if not prov.get("convention") and (".specloc" in attrs or "neurodata_type" in attrs):
        return  # another tool's index of an NWB file
    raise RefindexError(NOT_NWB, file=label or (prov.get("source") or {}).get("url"))


def require_nwb_file(h5: Any, label: str) -> None:
    """:func:`require_nwb` of an open ``h5py.File`` (its root group's attributes), for a file the h5py
    road opens before any index of it is made."""
    names = set(h5.attrs.keys())
    if ".specloc" not in names and "neurodata_type" not in names:
        raise RefindexError(NOT_NWB, file=label)


def _read_icechunk(ic: Any, options: ReadOptions, external: dict[str, Any] | None, scan_missing: bool) -> Any:
    """hdmf-zarr's ``NWBZarrIO`` over an Icechunk repository's read-only session (attribute types and
    linked files as for a JSON index of the same file)."""
    ic.zarr_group()  # the codecs registered, the group checked
    io = nwb_io_class_v3()(path=ic.store(), mode="r")
    record = ic.record()
    io.refindex_attribute_types = recorded_types(record)
    source = (record.get("source") or {}).get("url")
    # linked files: as for a JSON index of this file (their chunks read with the source's options)
    io.refindex_external = ExternalIndexes(
        {"refindex": {**record, "zarr_format": 3}, "templates": {"u": source} if source else {}},
        replace(options, storage_options=options.remote_options), external=external, scan_missing=scan_missing)
    return _read_kept(io)


def _read_kept(io: Any) -> Any:
    """``io.read()``, the io kept on the file (``nwbfile.refindex_io``) so it is not garbage collected."""
    nwbfile = io.read()
    try:
        nwbfile.refindex_io = io
    except Exception:  # pragma: no cover - containers may refuse new attributes
        pass
    return nwbfile
