"""hdmf-zarr's IO classes over refindex's stores: the hierarchy from memory, links into other indexed files,
attribute types as the scan recorded them.  Made on first use, so hdmf-zarr loads only when an NWB file is read."""

from __future__ import annotations

import json
import posixpath
from typing import Any

import numpy as np

from ._attrtypes import restore_attribute_types
from ..zarr_store._store import IndexStore
from ._external import ExternalIndexes
from ._tree import ZarrTree


class AttributeTypes:
    """What both IO classes add to hdmf-zarr's: the attribute types JSON cannot carry, restored before the
    containers are made (:mod:`refindex.read.nwb._attrtypes`), and the indexes of linked files."""

    refindex_external: ExternalIndexes | None = None
    refindex_attribute_types: dict[str, dict[str, str]] = {}

    def read_builder(self):
        builder = super().read_builder()  # type: ignore[misc]  (hdmf-zarr's IO class follows in the MRO)
        restore_attribute_types(builder, self.refindex_attribute_types)
        return builder


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

    class RefsNWBZarrV2IO(AttributeTypes, NWBZarrV2IO):
        """``NWBZarrV2IO`` over an index: the hierarchy from memory, links into other indexed files.

        hdmf-zarr 0.14 re-opens a reference's ``source`` relative to ``str(store)``,
        which cannot work for a store object; here that source's own index is opened.
        """

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

    class RefsNWBZarrIO(AttributeTypes, NWBZarrIO):

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


def _refuse_pickle(obj: Any, allow_pickle: bool, error: type[Exception]) -> None:
    """hdmf-zarr's rule for v2 files: never decode the pickle codec unless the caller trusts the file."""
    if allow_pickle or not hasattr(obj, "metadata") or not hasattr(obj.metadata, "filters"):
        return
    meta = obj.metadata
    codecs = [meta.compressor, *(meta.filters or ())]
    if any(getattr(c, "codec_id", None) == "pickle" for c in codecs):
        raise error(f"Refusing to decode the unsafe pickle codec in {obj.name!r}; pass allow_pickle=True only "
                    "if this file is trusted")
