"""Open NWB files through an index with hdmf-zarr's ``NWBZarrV2IO``, without per-object round trips.

hdmf-zarr builds an NWB file by walking it object by object, and each call it makes
into zarr crosses to zarr's event-loop thread (about 0.3 ms) and asks the store for
keys; a file of a thousand objects spent most of its open there.  Everything that
walk needs is in the index, in memory.  :class:`ZarrTree` makes the zarr groups and
arrays from the index's consolidated metadata without reading the store;
:func:`nwb_io_class`'s IO hands them to hdmf-zarr through the hooks it offers for
that (``_iter_children``, ``resolve_ref``, ``_open_file*``).  Arrays are still zarr
arrays, so data stays lazy and chunks are fetched concurrently, but three read
patterns are served from memory, after values read through zarr itself:

* every 0-d dataset (hdmf reads all of them while building), read in one batch;
* an array read a second time, when it is small (:data:`SMALL_ARRAY_BYTES`): what
  hdmf does with table columns, one row at a time;
* table columns (``VectorData``, ``VectorIndex`` ...) up to :data:`TABLE_COLUMN_BYTES`.

These go through zarr's public selection methods on the array instance; anything
they do not cover (fields, ``out=``, several fancy axes) is left to zarr.
"""

from __future__ import annotations

import json
import os
import posixpath
import weakref
import zlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, Literal

import numpy as np

from .. import urls
from ..errors import RefindexError, SourceError
from ..gcpause import held_for_open
from ._attrtypes import provenance_of, recorded_types, restore_attribute_types
from ._consolidated import group_document, metadata_of
from ._load import load_refs, zarr_format_of
from ._open import ReadOptions, SourceCheck, declared_of, index_location, index_store, prepare_unchecked, store_of
from ._store import IndexStore
from ._urlcheck import declared_sources, untrusted
from ._urlpolicy import UrlPolicy

Reader = Literal["auto", "h5py", "zarr"]
READERS = ("auto", "h5py", "zarr")
DEFAULT_READER: Reader = "auto"  # chosen by exactness across writers, then speed (docs/h5py.md)
SMALL_ARRAY_BYTES = 16 << 20
READ_AHEAD_BYTES = 8 << 20  # the first chunk of the main recording, fetched while the NWBFile is built
TABLE_COLUMN_BYTES = 256 << 20
TABLE_COLUMN_TYPES = frozenset({"VectorData", "VectorIndex", "ElementIdentifiers", "DynamicTableRegion"})
_TREES: "weakref.WeakKeyDictionary[IndexStore, ZarrTree]" = weakref.WeakKeyDictionary()


class ZarrTree:
    """The zarr groups and arrays of one index, made from its consolidated metadata (no store reads)."""

    def __init__(self, store: IndexStore):
        import zarr
        from zarr.core.group import AsyncGroup
        from zarr.storage import StorePath

        raw = store.inline(".zmetadata")
        if raw is None:
            raise RefindexError("the index has no consolidated metadata (.zmetadata)")
        self.store = store
        self.root: Any = zarr.Group(AsyncGroup.from_dict(StorePath(store, ""), group_document(
            metadata_of(json.loads(raw)))))
        self.flat = self.root.metadata.consolidated_metadata.flattened_metadata
        self.children: dict[str, list[str]] = {}
        for path in sorted(self.flat):
            parent, _, name = path.rpartition("/")
            self.children.setdefault(parent, []).append(name)
        self._objects: dict[str, Any] = {"": self.root}
        self._scalars: dict[str, Any] | None = None

    @classmethod
    def of(cls, store: IndexStore) -> "ZarrTree":
        tree = _TREES.get(store)
        if tree is None:
            tree = _TREES[store] = cls(store)
        return tree

    def get(self, path: str) -> Any:
        """The zarr object at ``path`` ("a/b"; "" the root); KeyError when there is none."""
        path = path.strip("/")
        obj = self._objects.get(path)
        if obj is not None:
            return obj
        import zarr
        from zarr.core.array import AsyncArray
        from zarr.core.group import AsyncGroup, GroupMetadata
        from zarr.storage import StorePath

        meta = self.flat[path]
        where = StorePath(self.store, path)
        if isinstance(meta, GroupMetadata):
            obj = zarr.Group(AsyncGroup(metadata=meta, store_path=where))
        else:
            obj = zarr.Array(AsyncArray(metadata=meta, store_path=where))
            self._speed_up(path, obj)
        self._objects[path] = obj
        return obj

    # ------------------------------------------------------------------ arrays served from memory
    def _speed_up(self, path: str, arr: Any) -> None:
        if arr.ndim == 0:
            value = self.scalars().get(path, _MISSING)
            if value is not _MISSING:
                serve_from_memory(arr, lambda: value)
            return
        raw = self._single_inline_chunk(path, arr.metadata)
        if raw is not None:  # decoded here on first read, no trip through zarr
            serve_from_memory(arr, partial(_whole_inline_array, arr.metadata, raw))
            return
        limit = TABLE_COLUMN_BYTES if arr.attrs.get("neurodata_type") in TABLE_COLUMN_TYPES else SMALL_ARRAY_BYTES
        if _decoded_bytes(arr) <= limit:
            serve_from_memory(arr, _whole_array_loader(arr), first_touch=limit == SMALL_ARRAY_BYTES)

    def _single_inline_chunk(self, path: str, meta: Any) -> bytes | None:
        """The inline bytes of a v2 array held in one chunk, or None."""
        if getattr(meta, "zarr_format", None) != 2 or any(-(-s // c) != 1 for s, c in zip(meta.shape, meta.chunks)):
            return None
        key = meta.dimension_separator.join("0" * len(meta.shape)) if meta.shape else "0"
        return self.store.inline(f"{path}/{key}")

    def scalars(self) -> dict[str, Any]:
        """Values of every 0-d array whose one chunk is inline (hdmf reads them all while building).

        Decoded here with the array's own codecs and dtype, as zarr does, instead of one
        trip through zarr's event loop each; a chunk that is not inline, or a value this
        cannot decode, is left to zarr.
        """
        if self._scalars is None:
            self._scalars = {}
            for path, meta in self.flat.items():
                if getattr(meta, "shape", None) != () or getattr(meta, "zarr_format", None) != 2:
                    continue
                raw = self.store.inline(f"{path}/0")
                if raw is not None:
                    try:
                        self._scalars[path] = decode_chunk(meta, raw)[()]
                    except Exception:
                        pass
        return self._scalars


def decode_chunk(meta: Any, raw: bytes) -> np.ndarray:
    """One chunk of a v2 array (``meta``) decoded as zarr decodes it: chunk shape, zarr's dtype."""
    buf: Any = raw
    if meta.compressor is not None:
        buf = meta.compressor.decode(buf)
    for codec in reversed(meta.filters or ()):
        buf = codec.decode(buf)
    dtype = meta.dtype.to_native_dtype()
    if isinstance(buf, np.ndarray) and buf.dtype == object:  # vlen-utf8 / vlen-bytes
        values = buf if dtype.kind == "O" else buf.astype(dtype)
    else:
        values = np.frombuffer(memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf, dtype=dtype)
    if values.size != int(np.prod(meta.chunks, dtype=np.int64)):
        raise ValueError("the chunk holds another number of elements than its shape")
    return values.reshape(meta.chunks)


def _whole_inline_array(meta: Any, raw: bytes) -> np.ndarray:
    """``a[...]`` of an array held in one inline chunk (the chunk may be larger than the array)."""
    return decode_chunk(meta, raw)[tuple(slice(0, n) for n in meta.shape)]


_MISSING = object()


def _decoded_bytes(arr: Any) -> int:
    """Bytes ``arr`` takes in memory once read (object/string arrays: a generous estimate)."""
    itemsize = arr.dtype.itemsize if arr.dtype.kind not in "OT" else 64
    return int(np.prod(arr.shape, dtype=np.float64)) * max(1, itemsize)


def _whole_array_loader(arr: Any):
    from zarr import Array

    return partial(Array.get_basic_selection, arr, Ellipsis)


def serve_from_memory(arr: Any, load, first_touch: bool = False) -> None:
    """Serve ``arr``'s basic and single-axis orthogonal selections from ``load()``'s values.

    The values are what zarr itself returned for the whole array, indexed as zarr would.
    ``first_touch``: the first read still goes through zarr for just its selection; the
    whole array is loaded when it is read again.
    """
    from zarr import Array

    state: dict[str, Any] = {"touched": not first_touch}

    def values() -> Any:
        if "values" not in state:
            if not state["touched"]:
                state["touched"] = True
                return None
            state["values"] = load()
        return state["values"]

    def basic(selection: Any = Ellipsis, *, out: Any = None, prototype: Any = None, fields: Any = None) -> Any:
        if out is None and prototype is None and not fields:  # zarr passes [] for "no fields"
            v = values()
            if v is not None:
                return _index(v, selection)
        return Array.get_basic_selection(arr, selection, out=out, prototype=prototype, fields=fields or None)

    def orthogonal(selection: Any, *, out: Any = None, fields: Any = None, prototype: Any = None) -> Any:
        sel = selection if isinstance(selection, tuple) else (selection,)
        if out is None and prototype is None and not fields and _one_fancy_axis(sel):
            v = values()
            if v is not None:
                return _index(v, tuple(np.asarray(s) if isinstance(s, list) else s for s in sel))
        return Array.get_orthogonal_selection(arr, selection, out=out, fields=fields or None, prototype=prototype)

    arr.get_basic_selection = basic
    arr.get_orthogonal_selection = orthogonal


def _one_fancy_axis(sel: tuple) -> bool:
    """At most one axis indexed by a list/array (then numpy's fancy indexing is zarr's orthogonal one)."""
    fancy = 0
    for s in sel:
        if s is Ellipsis:
            return False
        if isinstance(s, (list, np.ndarray)):
            a = np.asarray(s)
            if a.ndim != 1 or a.dtype.kind not in "iub":
                return False
            fancy += 1
    return fancy <= 1


def _index(values: Any, selection: Any) -> Any:
    """``values[selection]`` as zarr returns it: a new array (never a view of the values kept here),
    0-d where numpy would give a scalar."""
    if not isinstance(values, np.ndarray):  # a 0-d array read whole: zarr returns the scalar itself
        return values
    sel = selection if isinstance(selection, tuple) else (selection,)
    if not any(s is Ellipsis for s in sel):
        sel = sel + (Ellipsis,)
    return values[sel].copy()


# ---------------------------------------------------------------------- external links
def _with_source(v: Any, source: str) -> Any:
    """``v`` (parsed JSON) with every ``{"source": ".", "path": ...}`` entry naming ``source`` instead."""
    if isinstance(v, dict):
        out = {k: _with_source(x, source) for k, x in v.items()}
        if out.get("source") == "." and "path" in out:
            out["source"] = source
        return out
    if isinstance(v, list):
        return [_with_source(x, source) for x in v]
    return v


def _rebase_self_refs(refs: dict[str, Any], source: str) -> dict[str, Any]:
    """A copy of ``refs`` whose in-file links/attribute references (``source: "."``) name ``source``.

    Objects read from a linked file are resolved by the IO of the file that links to them,
    so their own links must say which file they live in.  (References stored inside
    datasets of the linked file are left as they are.)
    """

    walk = partial(_with_source, source=source)

    new = {}
    meta = {}
    for key, value in refs["refs"].items():
        base = key.rsplit("/", 1)[-1]
        if base == ".zmetadata":
            continue  # rebuilt below from the rewritten documents
        if base == ".zattrs" and isinstance(value, str) and '"."' in value:
            value = json.dumps(walk(json.loads(value)), allow_nan=True)
        if base in (".zgroup", ".zarray", ".zattrs"):
            meta[key] = json.loads(value)
        new[key] = value
    new[".zmetadata"] = json.dumps({"metadata": meta, "zarr_consolidated_format": 1}, allow_nan=True)
    return {**refs, "refs": new}


def _rebase_self_refs_v3(refs: dict[str, Any], source: str) -> dict[str, Any]:
    """:func:`_rebase_self_refs` for a zarr v3 index: ``_LINKS`` and ``_REFERENCE`` entries in its
    ``zarr.json`` documents name ``source``; the root's consolidated metadata is rebuilt from them."""

    walk = partial(_with_source, source=source)

    new: dict[str, Any] = {}
    docs: dict[str, Any] = {}
    for key, value in refs["refs"].items():
        if key.rsplit("/", 1)[-1] == "zarr.json" and isinstance(value, str):
            doc = json.loads(value)
            doc.pop("consolidated_metadata", None)
            doc["attributes"] = walk(doc.get("attributes") or {})
            docs[key[: -len("zarr.json")].rstrip("/")] = doc
            value = json.dumps(doc, allow_nan=True)
        new[key] = value
    if "" in docs:
        root = dict(docs[""], consolidated_metadata={"kind": "inline", "must_understand": False,
                                                     "metadata": {k: d for k, d in docs.items() if k}})
        new["zarr.json"] = json.dumps(root, allow_nan=True)
    return {**refs, "refs": new}


class ExternalIndexes:
    """Opens the indexes of files that external links point into, by link ``source``.

    Looks, in order, in ``external`` (a dict source -> refs, JSON path or URL), in the
    index's ``refindex.external`` section (embedded ``refs`` or an ``index`` file beside
    the index) and finally scans the HDF5 file next to the indexed file on the fly.

    Each is an index in its own right, judged by ``opts``' URL policy when a link first
    leads into it: embedded ones as part of the index that holds them, index files and
    ``external`` entries as indexes from where they are; the file named for a scan on the
    fly must be one the index may name (the index made from it is then trusted).
    """

    def __init__(self, refs: dict[str, Any], opts: ReadOptions, *, index_location: str | None = None,
                 external: dict[str, Any] | None = None, scan_missing: bool = True):
        self.refs = refs
        self.zarr_format = zarr_format_of(refs)
        self.opts = opts
        self.index_location = index_location
        self.external = external or {}
        self.scan_missing = scan_missing
        self._stores: dict[str, IndexStore] = {}
        self._policy: UrlPolicy | None = None

    def _main_url(self) -> str | None:
        return (self.refs.get("templates") or {}).get("u")

    def _admit(self, url: str, where: str) -> None:
        """Refuse to read ``url`` (named by the main index at ``where``) if its policy refuses it."""
        if self.opts.trust:
            return
        if self._policy is None:
            self._policy = replace(self.opts, index_url=self.opts.index_url or self.index_location).url_policy()
            self._policy.learn([u for _, u in declared_sources(self.refs)])
        why = self._policy.refusal(url)
        if why:
            raise untrusted(self._policy, where, url, why)

    def refs_for(self, source: str) -> dict[str, Any]:
        return self._load(source)[0]

    def _load(self, source: str) -> tuple[dict[str, Any], ReadOptions]:
        """(the index of ``source``, rebased; the options its store is made with)."""
        entry = ((self.refs.get("refindex") or {}).get("external") or {}).get(source) or {}
        opts, made_here = self.opts, False
        if source in self.external:
            given = self.external[source]
            r = load_refs(given)
            opts = replace(opts, index_url=None if isinstance(given, dict) else os.fspath(given))
        elif "refs" in entry:
            r = entry["refs"]  # judged as part of the index that holds it
        elif "index" in entry and self.index_location:
            where = urls.beside(self.index_location, entry["index"])
            self._admit(where, f"refindex.external[{source!r}].index")
            r = load_refs(where)
            opts = replace(opts, index_url=where)
        elif self.scan_missing and (entry.get("url") or self._main_url()):
            from ..options import ScanOptions
            from ..pipeline import scan_refs

            target = entry.get("url") or urls.beside(self._main_url(), source)
            self._admit(target, f"refindex.external[{source!r}].url" if entry.get("url") else
                        f"the external link source {source!r}")
            r = scan_refs(target, ScanOptions(convention="hdmf", zarr_format=self.zarr_format))
            opts, made_here = replace(opts, trust=True), True  # made here, from a file the index may name
        else:
            raise SourceError(f"no index for the externally linked file {source!r}", file=source)
        if not isinstance(r, dict):
            raise RefindexError("externally linked indexes must be JSON indexes", file=source)
        if self.opts.check_source and not made_here:  # (an index made here just now is fresh)
            from .freshness import check_source

            check_source(r, storage_options=self.opts.remote_options)
        if zarr_format_of(r) != self.zarr_format:
            raise RefindexError(f"the index of the externally linked file is zarr v{zarr_format_of(r)}, the linking "
                                f"one zarr v{self.zarr_format}", file=source)
        rebase = _rebase_self_refs_v3 if self.zarr_format == 3 else _rebase_self_refs
        return rebase(r, source), opts

    def store(self, source: str) -> IndexStore:
        if source not in self._stores:
            r, opts = self._load(source)
            label = "refindex:" + ((r.get("templates") or {}).get("u") or source)
            self._stores[source] = index_store(r, opts, label=label)
        return self._stores[source]


# ---------------------------------------------------------------------- the IO class
_IO_CLASS: Any = None


def nwb_io_class() -> Any:
    """``NWBZarrV2IO`` subclass that reads an :class:`IndexStore` from memory and resolves external links."""
    global _IO_CLASS
    if _IO_CLASS is not None:
        return _IO_CLASS
    from hdmf_zarr.backend import ROOT_NAME
    from hdmf_zarr.backend_zarrv2 import UnsafePickleCodecError
    from hdmf_zarr.nwb_zarrv2 import NWBZarrV2IO

    def tree_of(store: Any) -> ZarrTree | None:
        return ZarrTree.of(store) if isinstance(store, IndexStore) else None

    class RefsNWBZarrV2IO(NWBZarrV2IO):
        """``NWBZarrV2IO`` over an index: the hierarchy from memory, links into other indexed files.

        hdmf-zarr 0.14 re-opens a reference's ``source`` relative to ``str(store)``,
        which cannot work for a store object; here that source's own index is opened.
        """

        refindex_external: ExternalIndexes | None = None
        refindex_attribute_types: dict[str, dict[str, str]] = {}

        def read_builder(self):
            builder = super().read_builder()
            restore_attribute_types(builder, self.refindex_attribute_types)
            return builder

        @classmethod
        def _open_for_namespaces(cls, store):
            tree = tree_of(store)
            return tree.root if tree is not None else super()._open_for_namespaces(store)

        def _open_file(self, store, mode, storage_options=None):
            tree = tree_of(store)
            return tree.root if tree is not None else super()._open_file(store, mode, storage_options)

        def _open_file_consolidated(self, store, mode, storage_options=None):
            tree = tree_of(store)
            return tree.root if tree is not None else super()._open_file_consolidated(store, mode, storage_options)

        def _iter_children(self, zarr_obj):
            tree = tree_of(zarr_obj.store)
            if tree is None:
                yield from super()._iter_children(zarr_obj)
                return
            path = zarr_obj.path
            for name in tree.children.get(path, []):
                child = tree.get(f"{path}/{name}" if path else name)
                _refuse_pickle(child, self.allow_pickle, UnsafePickleCodecError)
                yield name, child

        def resolve_ref(self, zarr_ref):
            ref = _as_ref(zarr_ref)
            source = ref.get("source") if isinstance(ref, dict) else None
            if source == ".":
                tree = tree_of(self._file.store) if self._file is not None else None
                if tree is not None:
                    return _resolve_in(tree, ref.get("path"), ".", ROOT_NAME, self.allow_pickle,
                                       UnsafePickleCodecError)
            elif source is not None and self.refindex_external is not None:
                tree = ZarrTree.of(self.refindex_external.store(source))
                return _resolve_in(tree, ref.get("path"), source, ROOT_NAME, self.allow_pickle,
                                   UnsafePickleCodecError)
            return super().resolve_ref(zarr_ref)

    _IO_CLASS = RefsNWBZarrV2IO
    return _IO_CLASS


_IO3_CLASS: Any = None


def nwb_io_class_v3() -> Any:
    """hdmf-zarr 0.14's ``NWBZarrIO`` (zarr v3) that follows external links into the linked files' indexes.

    For a ``source`` other than ``"."``, hdmf-zarr re-opens the path ``str(store)`` joined
    with the source, which a store object has not; here that file's own v3 index is opened
    (:class:`ExternalIndexes`) and the object looked up in it.  Each file's store has its
    own label, so hdmf-zarr's caches (keyed by ``str(store)`` and the object's path) keep
    objects of the two files apart.  Everything else is stock ``NWBZarrIO``.
    """
    global _IO3_CLASS
    if _IO3_CLASS is not None:
        return _IO3_CLASS
    import zarr
    from hdmf_zarr.backend import ROOT_NAME
    from hdmf_zarr.nwb import NWBZarrIO

    class RefsNWBZarrIO(NWBZarrIO):
        refindex_external: ExternalIndexes | None = None
        refindex_attribute_types: dict[str, dict[str, str]] = {}

        def read_builder(self):
            builder = super().read_builder()
            restore_attribute_types(builder, self.refindex_attribute_types)
            return builder

        def resolve_ref(self, zarr_ref):
            ref = _as_ref(zarr_ref)
            source = ref.get("source") if isinstance(ref, dict) else None
            if source in (None, ".") or self.refindex_external is None:
                return super().resolve_ref(zarr_ref)
            roots = self.__dict__.setdefault("_refindex_roots", {})
            if source not in roots:
                roots[source] = zarr.open_group(self.refindex_external.store(source), mode="r", zarr_format=3)
            path = (ref.get("path") or "").strip("/")
            if not path:
                return ROOT_NAME, roots[source]
            try:
                return posixpath.basename(path), roots[source][path]
            except KeyError as e:
                raise ValueError(f"Found bad link to object /{path} in file {source}") from e

    _IO3_CLASS = RefsNWBZarrIO
    return _IO3_CLASS


def _as_ref(zarr_ref: Any) -> Any:
    ref = zarr_ref
    if isinstance(ref, np.ndarray) and ref.ndim == 0:
        ref = ref[()]
    if isinstance(ref, str):
        try:
            ref = json.loads(ref)
        except json.JSONDecodeError:
            ref = {"source": ".", "path": ref}  # hdmf-zarr's plain-path form
    return ref


def _resolve_in(tree: ZarrTree, path: str | None, source: str, root_name: str, allow_pickle: bool,
                pickle_error: type[Exception]) -> tuple[str, Any]:
    if not path or path == "/":
        return root_name, tree.root
    try:
        target = tree.get(path)
    except KeyError as e:
        raise ValueError(f"Found bad link to object {path} in file {source}") from e
    _refuse_pickle(target, allow_pickle, pickle_error)
    return posixpath.basename(path.rstrip("/")), target


def first_acquisition_chunks(store: IndexStore, budget: int) -> tuple[list[str], Callable[[str, bytes], bytes] | None]:
    """The key of the first chunk of the main recording in a remote file, if it fits ``budget``:
    of the ``acquisition/<name>/data`` arrays, the one with the longest first (time) axis;
    and how to recode its bytes for a quick first read (:func:`stored_zlib`), if there is a way.

    One key, one request: the read-ahead should cost the open no more than that (from the
    consolidated metadata; ties go to the first name).
    """
    raw = store.inline(".zmetadata")
    if raw is not None:
        meta = json.loads(raw).get("metadata") or {}
        arrays = {k[: -len("/.zarray")]: v for k, v in meta.items() if k.endswith("/.zarray")}
    else:
        root = json.loads(store.inline("zarr.json") or b"{}")
        nodes = (root.get("consolidated_metadata") or {}).get("metadata") or {}
        arrays = {k: v for k, v in nodes.items() if v.get("node_type") == "array"}
    recordings = sorted((-int((doc.get("shape") or [0])[0]), path) for path, doc in arrays.items()
                        if _is_acquisition_data(path) and doc.get("shape"))
    for _, path in recordings[:1]:
        key = f"{path}/{_first_chunk_key(arrays[path])}"
        ref = store.reference(key)
        if ref is not None and ref[2] is not None and not urls.is_local(ref[0]) and ref[2] <= budget:
            return [key], stored_zlib(arrays[path])
    return [], None


def stored_zlib(doc: dict[str, Any]) -> Callable[[str, bytes], bytes] | None:
    """For a v2 array compressed by zlib alone: a recoding of a chunk as *stored* zlib (level 0).

    Decoded, it is the same bytes; decoding it is a copy instead of an inflate (0.2 ms
    instead of 2.8 ms for the P4 file's 640 KB chunk), so the read-ahead does the inflate
    in the background while the NWBFile is built, and the first plot does not.  Anything
    unexpected (another codec, a chunk that does not inflate to the chunk's size) keeps
    the bytes as they are.
    """
    if (doc.get("compressor") or {}).get("id") != "zlib" or doc.get("filters") or not isinstance(doc.get("dtype"), str):
        return None
    try:
        nbytes = int(np.prod(doc["chunks"], dtype=np.int64)) * np.dtype(doc["dtype"]).itemsize
    except (KeyError, TypeError, ValueError):
        return None

    def recode(key: str, data: bytes) -> bytes:
        try:
            plain = zlib.decompress(data, 15, max(nbytes, 1))
        except zlib.error:
            return data
        return zlib.compress(plain, 0) if len(plain) == nbytes else data

    return recode


def _is_acquisition_data(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 3 and parts[0] == "acquisition" and parts[2] == "data"


def _first_chunk_key(doc: dict[str, Any]) -> str:
    """The key of chunk (0, ..., 0) of a v2 ``.zarray`` or v3 array document."""
    ndim = len(doc.get("shape") or ())
    if doc.get("zarr_format") == 3:
        enc = doc.get("chunk_key_encoding") or {}
        sep = (enc.get("configuration") or {}).get("separator", "/" if enc.get("name") == "default" else ".")
        return sep.join(["c", *("0" * ndim)]) if enc.get("name") == "default" else sep.join("0" * ndim) or "0"
    return (doc.get("dimension_separator") or ".").join("0" * ndim) or "0"


def _refuse_pickle(obj: Any, allow_pickle: bool, error: type[Exception]) -> None:
    """hdmf-zarr's rule for v2 files: never decode the pickle codec unless the caller trusts the file."""
    if allow_pickle or not hasattr(obj, "metadata") or not hasattr(obj.metadata, "filters"):
        return
    meta = obj.metadata
    codecs = [meta.compressor, *(meta.filters or ())]
    if any(getattr(c, "codec_id", None) == "pickle" for c in codecs):
        raise error(f"Refusing to decode the unsafe pickle codec in {obj.name!r}; pass allow_pickle=True only "
                    "if this file is trusted")


def _h5py_road(refs: Any, reader: Reader, **options: Any) -> tuple[Any, Any]:
    """(the index of ``refs`` prepared, the ``h5py.File`` over it or None when ``reader`` says the zarr road
    takes it: "auto" and links into other files).  Collection is held while it opens (the open's
    objects live as long as the file, refindex.gcpause); pynwb's read after it is not held.
    ``options``: :func:`~refindex.read.h5py_road.prepared`'s (``fetched`` among them)."""
    from .h5py_road import Road, on_the_fly, open_road, prepared, uncached_remote_hdf5

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
    scan recorded (:mod:`refindex.read._attrtypes`) before the containers are made on the zarr
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
    from .h5py_road import SourceAsk, requested_early

    asked = SourceAsk(remote_options, allowed_urls, trust) if check_source else None
    with requested_early(refs, storage_options, cache, asked) as fetched:  # as h5py_file: sent before the rest loads
        if reader != "zarr":
            from pynwb import NWBHDF5IO

            prep, road = _h5py_road(refs, reader, storage_options=storage_options, remote_options=remote_options,
                                    check_source=check_source, cache=cache, allowed_urls=allowed_urls, trust=trust,
                                    group=group, branch=branch, snapshot=snapshot, fetched=fetched)
            if road is not None:
                return _read_kept(NWBHDF5IO(file=road, mode="r"))
            # "auto" and links into other files: the zarr road follows them through the linked files' indexes
            if prep.icechunk is not None:
                return _read_icechunk(prep.icechunk, options, external, scan_missing)
            loaded, opts, check = prep.loaded, replace(prep.read_options, remote_protocol=remote_protocol), prep.check
        else:
            from ._open import opened_icechunk

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
