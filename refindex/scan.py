"""Walk an HDF5 file with h5py and build the neutral :class:`~refindex.model.Tree`.

The scan reads metadata only, except where the index must carry values inline:
variable-length data, references, compact datasets, chunks written with filters
skipped, data behind filters no zarr codec can run, and chunks below the inline
threshold.  Every dataset either gets an exact representation or raises
:class:`UnsupportedError` (recorded instead when ``on_unsupported="skip"``).
"""

from __future__ import annotations

import array
import gc
import json
import os
import posixpath
import time
from dataclasses import asdict, dataclass
from operator import itemgetter
from typing import Any, Literal

import h5py
import numpy as np

from . import codecs
from .compare import object_key, records_equal
from .errors import RefindexError, UnsupportedError
from .model import ArrayNode, ChunkTable, GroupNode, LinkNode, Tree, join
from .progress import NoProgress, Progress

try:  # filter plugins so h5py can decode what must be inlined
    import hdf5plugin  # noqa: F401
except ImportError:  # pragma: no cover
    pass

MiB = 1 << 20
_U32 = next(t for t in "IL" if array.array(t).itemsize == 4)  # array typecode of a uint32 (filter masks)
GRID_PREALLOCATE = 1 << 24  # rows of a chunk-coordinate table allocated up front (the rest grow)
BULK_INLINE = 10_000  # more tiny chunks than this are read in merged ranges, not one by one
LOOKUP_SAMPLE, LOOKUP_BUDGET = 64, 4 << 20  # chunks read through libhdf5's lookup to check the listing

# HDF5 attributes that are bookkeeping of dimension scales or netCDF, not user metadata.
_HIDDEN_ATTRS = {"DIMENSION_LIST", "REFERENCE_LIST", "_Netcdf4Dimid", "_Netcdf4Coordinates"}
_SCALE_ATTRS = {"CLASS", "NAME"}


@dataclass
class ScanOptions:
    """What the scanner may inline and how it treats what it cannot represent.

    ``inline_threshold``: chunks stored in fewer bytes than this are copied into the
    index (saves a request per tiny chunk).  ``inline_dataset_threshold``: datasets
    whose chunks take fewer bytes than this in all are copied in whole.  ``inline_max``: most bytes any one dataset
    may add to the index when its values must be inlined (vlen data, unsupported
    filters); larger ones are errors.  ``contiguous_chunk_bytes``: split contiguous
    datasets bigger than this into virtual chunks of about this size, so partial
    reads stay small (``None`` or 0: one chunk).  ``on_unsupported``: ``"error"`` raises,
    ``"skip"`` records the dataset and its reason in the index's metadata.
    """

    inline_threshold: int = 256
    # Whole datasets stored in fewer bytes than this are copied in: the scalars, short strings,
    # table columns and indexes a reader (hdmf building NWB containers, xarray reading
    # coordinates) fetches on open anyway, one request each.
    inline_dataset_threshold: int = 16 << 10
    inline_max: int = 64 * MiB
    contiguous_chunk_bytes: int | None = 32 * MiB
    on_unsupported: Literal["error", "skip"] = "error"
    # Other files (external raw storage, external links) must resolve inside this folder
    # (None: the scanned file's folder) unless allow_outside; see refindex.safety.
    allowed_root: str | None = None
    allow_outside: bool = False
    max_inline_total: int | None = 256 * MiB  # inline bytes of the whole index
    # Decode the first, middle and last referenced chunk of every dataset and compare them
    # with libhdf5's values (catches chunk indexes that disagree with libhdf5's reads in damaged files).
    # None: on for local files, off for remote ones (it costs a request per dataset).
    check_sample: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def chunk_key(coords) -> str:
    return ".".join(str(int(c)) for c in coords) if len(coords) else "0"



def unsafe_type(tid) -> str | None:
    """Why h5py cannot read values of this HDF5 type safely, or None.

    h5py corrupts memory when it converts variable-length sequences of region
    references (seen with h5py 3.16 / HDF5 2.0: a second read crashes the process), so
    such types are refused before any value is read.
    """

    def walk(t, inside_vlen: bool) -> str | None:
        if isinstance(t, h5py.h5t.TypeReferenceID):
            if inside_vlen and not t.equal(h5py.h5t.STD_REF_OBJ):
                return "region references inside variable-length data (h5py cannot read them safely)"
            return None
        if isinstance(t, h5py.h5t.TypeVlenID) and not isinstance(t, h5py.h5t.TypeStringID):
            return walk(t.get_super(), True)
        if isinstance(t, h5py.h5t.TypeArrayID):
            return walk(t.get_super(), inside_vlen)
        if isinstance(t, h5py.h5t.TypeCompoundID):
            for i in range(t.get_nmembers()):
                why = walk(t.get_member_type(i), inside_vlen)
                if why:
                    return why
        return None

    return walk(tid, False)


_NC_DIMENSION_ONLY = "This is a netCDF dimension but not a netCDF variable"


def _netcdf_dimension_only(d: h5py.Dataset) -> bool:
    """The placeholder scale netCDF-4 writes for a dimension that has no coordinate variable."""
    try:
        if "NAME" not in d.attrs or not h5py.h5ds.is_scale(d.id) or d.id.get_storage_size():
            return False  # only never-written placeholders: anything with stored bytes is kept
        return str(codecs.jsonable(d.attrs["NAME"])).startswith(_NC_DIMENSION_ONLY)
    except Exception:
        return False


def _opaque_attr(aid) -> dict[str, Any]:
    """An opaque attribute as its raw bytes: ``{"zarr_dtype": "opaque", "tag", "shape", "base64"}``."""
    import base64

    t = aid.get_type()
    shape = tuple(aid.shape or ())
    arr = np.empty(shape, dtype=f"V{t.get_size()}")
    aid.read(arr, mtype=t)
    tag = t.get_tag()
    return {
        "zarr_dtype": "opaque",
        "tag": tag.decode("utf-8", "replace") if isinstance(tag, bytes) else str(tag),
        "shape": list(shape),
        "itemsize": t.get_size(),
        "base64": base64.standard_b64encode(arr.tobytes()).decode("ascii"),
    }


def _origin(coord, chunks, ndim: int) -> tuple[int, ...]:
    """Element offset of the chunk at grid position ``coord`` (libhdf5's chunk address)."""
    return tuple(int(c) * int(s) for c, s in zip(list(coord)[:ndim], chunks))


def _url_to_fs(url: str):
    import fsspec

    return fsspec.core.url_to_fs(url)


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


class Scanner:
    def __init__(self, h5: h5py.File, url: str, file_size: int, options: ScanOptions, label: str | None = None,
                 read_many=None, fs_for=None, progress: Progress | None = None):
        self.f = h5
        self.progress = progress or NoProgress()
        # (url or None for the scanned file, offsets, sizes) -> bytes of each range, in few requests
        self.read_many = read_many
        # Small chunks to copy into the index, read together once the walk is done:
        # (array, the table rows to inline).
        self._deferred: list[tuple[ArrayNode, ChunkTable]] = []
        self.fs_for = fs_for or _url_to_fs  # url -> (fsspec filesystem, path) for other files
        self.url = url
        self.file_size = file_size
        self.opts = options
        self.label = label or url
        self.tree = Tree(url=url)
        self.canonical: dict[tuple[int, int], str] = {}
        self.object_ids: dict[str, str | None] = {}
        self._phony: dict[str, list[tuple[str, int]]] = {}
        self._dimids: dict[int, str] | None = None  # netCDF-4 dimension ids -> names, found when first needed

    # ------------------------------------------------------------ helpers
    def fail(self, path: str | None, reason: str, exc: type[RefindexError] = UnsupportedError) -> RefindexError:
        return exc(reason, file=self.label, path=path)

    def _children(self, g: h5py.Group, path: str) -> list[str]:
        try:
            return sorted(g.keys())
        except Exception as e:
            raise self.fail(path, f"cannot list group members: {e}", RefindexError) from e

    def index_objects(self) -> None:
        """First pass over hard links: the canonical (first, sorted depth-first) path of every object."""
        stack = [("/", self.f)]
        self.canonical[object_key(self.f)] = "/"
        datasets = 0
        while stack:
            path, g = stack.pop()
            kids = []
            for name in self._children(g, path):
                try:
                    info = g.id.links.get_info(name.encode("utf-8"))
                except Exception as e:
                    raise self.fail(join(path, name), f"cannot read link: {e}", RefindexError) from e
                if info.type != h5py.h5l.TYPE_HARD:
                    continue
                child = join(path, name)
                try:  # the object's identity without opening it (what object_key reads from an open one)
                    st = h5py.h5g.get_objinfo(g.id, name.encode("utf-8"))
                    key = (st.fileno, st.objno)
                    if key in self.canonical:
                        continue
                    self.canonical[key] = child
                    if st.type == h5py.h5g.GROUP:
                        kids.append((child, g[name]))
                    elif st.type == h5py.h5g.DATASET:
                        datasets += 1
                except Exception as e:
                    raise self.fail(child, f"cannot open object: {e}", RefindexError) from e
            stack.extend(reversed(kids))
        self.progress.start(datasets)

    def canonical_path(self, obj) -> str:
        key = object_key(obj)
        return self.canonical.get(key) or obj.name

    def object_id_of(self, obj) -> str | None:
        try:
            v = obj.attrs.get("object_id")
        except Exception:
            return None
        return codecs.jsonable(v) if v is not None else None

    # ------------------------------------------------------------ references
    def ref_obj(self, ref) -> Any:
        """A reference as a JSON object following hdmf-zarr's storage spec (plus ``region``)."""
        if not ref:
            return None
        try:
            target = self.f[ref]
        except Exception as e:
            return {"source": ".", "path": None, "error": f"unresolvable reference: {e}"}
        out: dict[str, Any] = {
            "source": ".",
            "path": self.canonical_path(target),
            "object_id": self.object_id_of(target),
            "source_object_id": self.tree.root_object_id,
        }
        if isinstance(ref, h5py.RegionReference):
            out["region"] = self._region(ref, target)
        return out

    def ref_json(self, ref) -> str:
        return json.dumps(self.ref_obj(ref), allow_nan=True)

    def _region(self, ref, target) -> Any:
        space = h5py.h5r.get_region(ref, target.id)
        sel = space.get_select_type()
        if sel == h5py.h5s.SEL_ALL:
            return {"all": True}
        if sel == h5py.h5s.SEL_NONE:
            return {"none": True}
        if sel == h5py.h5s.SEL_POINTS:
            return {"points": np.asarray(space.get_select_elem_pointlist()).tolist()}
        blocks = np.asarray(space.get_select_hyper_blocklist())  # (n, 2, ndim) inclusive corners
        slabs = [[[int(a), int(b) + 1] for a, b in zip(blk[0], blk[1])] for blk in blocks]
        if len(slabs) == 1:
            return {"slices": slabs[0]}
        return {"blocks": slabs}

    # ------------------------------------------------------------ attributes
    def attrs_of(self, obj, path: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        try:
            names = sorted(obj.attrs.keys())
        except Exception as e:
            raise self.fail(path, f"cannot list attributes: {e}", RefindexError) from e
        is_scale = False
        if "CLASS" in names:
            try:
                is_scale = codecs.jsonable(obj.attrs["CLASS"]) == "DIMENSION_SCALE"
            except Exception:
                is_scale = False
        for name in names:
            if name in _HIDDEN_ATTRS or (is_scale and name in _SCALE_ATTRS):
                continue
            try:
                aid = h5py.h5a.open(obj.id, name.encode("utf-8"))
                why = unsafe_type(aid.get_type())
                if why:
                    raise UnsupportedError(why)
                try:
                    value = obj.attrs[name]
                except OSError:
                    if aid.get_type().get_class() != h5py.h5t.OPAQUE:
                        raise
                    out[name] = _opaque_attr(aid)  # h5py has no conversion path for this opaque type
                    continue
            except Exception as e:
                reason = f"attribute {name!r} cannot be read by h5py: {e}"
                if self.opts.on_unsupported == "skip":
                    self.tree.skipped.append({"path": path, "attribute": name, "reason": reason})
                    continue
                raise self.fail(path, reason) from e
            out[name] = self.attr_json(value)
        return out

    def attr_json(self, value) -> Any:
        if isinstance(value, (h5py.Reference, h5py.RegionReference)):
            return {"zarr_dtype": "object" if isinstance(value, h5py.Reference) and not isinstance(value, h5py.RegionReference) else "region",
                    "value": self.ref_obj(value)}
        if isinstance(value, np.ndarray) and h5py.check_ref_dtype(value.dtype) is not None:
            return [self.attr_json(v) for v in value.reshape(-1)] if value.ndim else self.attr_json(value[()])
        return codecs.jsonable(value, self.ref_obj)

    # ------------------------------------------------------------ walk
    def run(self) -> Tree:
        t0 = time.perf_counter()
        self.tree.root_object_id = self.object_id_of(self.f)
        self.index_objects()
        self.visit_group(self.f, "/")
        self._read_deferred()
        self.tree.provenance["scan_seconds"] = round(time.perf_counter() - t0, 4)
        return self.tree

    def dimension_names(self) -> dict[int, str]:
        """netCDF-4 dimension ids -> names (for ``_Netcdf4Coordinates``), found on first use."""
        if self._dimids is None:
            self._dimids = {}
            for key, path in self.canonical.items():
                obj = self.f[path]
                if isinstance(obj, h5py.Dataset) and "_Netcdf4Dimid" in obj.attrs:
                    try:
                        self._dimids[int(np.asarray(obj.attrs["_Netcdf4Dimid"]).reshape(-1)[0])] = _basename(path)
                    except Exception:
                        pass
        return self._dimids

    def visit_group(self, g: h5py.Group, path: str) -> None:
        self.tree.groups[path] = GroupNode(path, self.attrs_of(g, path), self.object_id_of(g))
        for name in self._children(g, path):
            child = join(path, name)
            if "\\" in name:
                # zarr reads "\\" in a key as "/": the object would vanish from the index.
                err = self.fail(child, "names containing a backslash cannot be zarr keys")
                if self.opts.on_unsupported == "skip":
                    self.tree.skipped.append({"path": child, "reason": err.reason})
                    continue
                raise err
            info = g.id.links.get_info(name.encode("utf-8"))
            if info.type == h5py.h5l.TYPE_SOFT:
                self.tree.links.append(self._soft_link(g, name, path))
                continue
            if info.type == h5py.h5l.TYPE_EXTERNAL:
                self.tree.links.append(self._external_link(g, name, path))
                continue
            if info.type != h5py.h5l.TYPE_HARD:
                self.tree.links.append(LinkNode(name, path, "user-defined", None, resolved=False))
                continue
            obj = g[name]
            canon = self.canonical.get(object_key(obj))
            if canon != child:
                self.tree.links.append(LinkNode(name, path, "hard", canon, target_object_id=self.object_id_of(obj)))
                continue
            if isinstance(obj, h5py.Group):
                self.visit_group(obj, child)
            elif isinstance(obj, h5py.Dataset) and _netcdf_dimension_only(obj):
                # A netCDF-4 dimension without a variable is a placeholder scale with no data;
                # as an array, xarray would show it as a bogus coordinate.  The dimension
                # survives as a name in _ARRAY_DIMENSIONS of the arrays that use it.
                self.tree.provenance.setdefault("omitted", []).append(
                    {"path": child, "reason": "netCDF dimension without a variable (holds no data)"})
            elif isinstance(obj, h5py.Dataset):
                self.visit_dataset(obj, child)
            # Committed datatypes hold no data; they are not part of the zarr view.

    def _soft_link(self, g, name: str, parent: str) -> LinkNode:
        link = g.get(name, getlink=True)
        written = link.path
        target = written if written.startswith("/") else posixpath.normpath(join(parent, written))
        try:
            obj = g[name]
        except Exception:
            obj = None
        if obj is None:
            return LinkNode(name, parent, "soft", target, resolved=False)
        return LinkNode(name, parent, "soft", self.canonical_path(obj), target_object_id=self.object_id_of(obj))

    def _external_link(self, g, name: str, parent: str) -> LinkNode:
        """An external link; when libhdf5 can open the other file, its target's ids are recorded too."""
        link = g.get(name, getlink=True)
        node = LinkNode(name, parent, "external", link.path, file=link.filename, resolved=False)
        from .safety import resolve_inside

        try:  # libhdf5 opens the other file to resolve the link: only inside the allowed root
            resolve_inside(link.filename, self.url, allowed_root=self.opts.allowed_root,
                           allow_outside=self.opts.allow_outside)
        except RefindexError:
            return node
        try:
            obj = g[name]
        except Exception:  # the other file is missing or unreachable: keep the link unresolved
            return node
        node.resolved = True
        node.target_object_id = self.object_id_of(obj)
        node.target_root_object_id = self.object_id_of(obj.file)
        return node

    def visit_dataset(self, d: h5py.Dataset, path: str) -> None:
        try:
            self._visit_dataset(d, path)
        finally:
            self.progress.dataset_done()

    def _visit_dataset(self, d: h5py.Dataset, path: str) -> None:
        try:
            node = self.build_array(d, path)
        except RefindexError as e:
            if self.opts.on_unsupported == "skip":
                self.tree.skipped.append({"path": path, "reason": e.reason})
                return
            raise
        except Exception as e:
            err = self.fail(path, f"{type(e).__name__}: {e}")
            if self.opts.on_unsupported == "skip":
                self.tree.skipped.append({"path": path, "reason": err.reason})
                return
            raise err from e
        self._defer_small(node)
        self.tree.arrays[path] = node

    def _defer_small(self, node: ArrayNode) -> None:
        """Mark the referenced chunks that go into the index instead: each one below
        ``inline_threshold``, or all of them when the dataset's stored bytes are below
        ``inline_dataset_threshold``.  Their bytes are read after the walk, all together."""
        t = node.refs
        if t is None or not len(t):
            return
        stored = int(t.sizes.sum()) + sum(len(b) for b in node.inline.values())
        if stored < self.opts.inline_dataset_threshold:
            small = np.ones(len(t), dtype=bool)
        else:
            small = t.sizes < np.uint64(self.opts.inline_threshold)
            if not small.any():
                return
        self._deferred.append((node, t.take(small)))
        rest = t.take(~small)
        node.refs = rest if len(rest) else None

    def _read_deferred(self) -> None:
        """Copy the chunks :meth:`_defer_small` chose into the index: one batched read per file."""
        wanted: dict[str | None, list[tuple[ArrayNode, str, int, int]]] = {}
        for node, t in self._deferred:
            urls, which = t.row_urls()
            for coord, j, off, size in zip(t.coords.tolist(), which.tolist(), t.offsets.tolist(), t.sizes.tolist()):
                url = urls[j]
                wanted.setdefault(None if url in (None, self.url) else url, []).append(
                    (node, chunk_key(coord), off, size))
        for url, items in wanted.items():
            datas = self.read_many(url, [o for _, _, o, _ in items], [n for _, _, _, n in items])
            for (node, key, _, _), data in zip(items, datas):
                node.inline[key] = data
        self._deferred.clear()

    # ------------------------------------------------------------ datasets
    def build_array(self, d: h5py.Dataset, path: str) -> ArrayNode:
        dsid = d.id
        dcpl = dsid.get_create_plist()
        why = unsafe_type(dsid.get_type())
        if why:
            raise self.fail(path, why)
        dt = d.dtype
        try:
            plan = codecs.plan_dtype(dt, self.ref_json)
        except ValueError as e:
            raise self.fail(path, str(e)) from e
        attrs = self.attrs_of(d, path)
        attrs.update(plan.attrs)
        oid = attrs.get("object_id") if isinstance(attrs.get("object_id"), str) else None

        if d.shape is None:  # null dataspace: no elements, not even a scalar
            node = ArrayNode(path, (0,), (1,), plan.dtype if plan.dtype is not None else "|u1", None,
                             attrs=attrs, kind=plan.kind, object_id=oid)
            node.filters = [plan.object_codec] if plan.object_codec else None
            node.attrs["refindex_null_dataspace"] = True
            node.attrs["_ARRAY_DIMENSIONS"] = [self._phony_dim(path, 0, [])]
            return node

        shape = tuple(int(s) for s in d.shape) + plan.extra_shape
        node = ArrayNode(path, shape, shape, plan.dtype, None, attrs=attrs, kind=plan.kind,
                         scalar=(d.shape == ()), object_id=oid)
        node.attrs["_ARRAY_DIMENSIONS"] = self._dims(d, path, len(plan.extra_shape))

        if d.is_virtual:
            return self._virtual(d, node, plan)
        if dcpl.get_external_count() > 0:
            return self._external(d, node, plan, dcpl)
        if not plan.raw:
            return self._inline_converted(d, node, plan)

        nd = plan.numpy_dtype if plan.numpy_dtype is not None else dt
        node.fill_value = codecs.fill_value_json(self._fillvalue(d, nd), nd)
        layout = dcpl.get_layout()
        if layout == h5py.h5d.COMPACT:
            node.chunks = tuple(max(1, s) for s in shape)
            if d.size:
                data = np.ascontiguousarray(d[()])
                node.inline[chunk_key((0,) * len(shape))] = data.tobytes()
            return node
        strpad = codecs.string_padding(dsid.get_type())
        if layout == h5py.h5d.CONTIGUOUS:
            node = self._contiguous(d, node, nd)
            if strpad:
                node.filters = [strpad]
            return node
        if layout == h5py.h5d.CHUNKED:
            return self._chunked(d, node, plan, nd, dcpl, strpad)
        raise self.fail(path, f"unknown storage layout {layout}")

    def _virtual(self, d: h5py.Dataset, node: ArrayNode, plan: codecs.DTypePlan) -> ArrayNode:
        """References into the source files where the mappings allow it (refindex.vds), else inline values."""
        from .vds import sources_unreadable, virtual_or_none

        done, why = virtual_or_none(self, d, node, plan)
        if done is not None:
            return done
        problem = sources_unreadable(self, d)
        if problem:  # the values libhdf5 would give are fill values, not the data
            raise self.fail(node.path, f"virtual dataset cannot be indexed by reference ({why}), and {problem}")
        return self._inline_decoded(d, node, plan, f"virtual dataset (data gathered from its source files: {why})")

    def _fillvalue(self, d: h5py.Dataset, nd: np.dtype):
        try:
            fv = d.fillvalue
        except Exception:
            return np.zeros((), nd)[()]
        return fv

    def _dims(self, d: h5py.Dataset, path: str, extra: int) -> list[str]:
        ndim = len(d.shape)
        names: list[str | None] = [None] * ndim
        try:
            if ndim and h5py.h5ds.is_scale(d.id):
                names[0] = _basename(path)
            elif ndim and "DIMENSION_LIST" in d.attrs:
                for i in range(ndim):
                    try:
                        dim = d.dims[i]
                        if len(dim):
                            names[i] = _basename(self.canonical_path(dim[0]))
                    except Exception:
                        pass
        except Exception:
            pass
        if "_Netcdf4Coordinates" in d.attrs and ndim:
            try:
                ids = np.asarray(d.attrs["_Netcdf4Coordinates"]).reshape(-1)
                dimids = self.dimension_names()
                for i, dimid in enumerate(ids[:ndim]):
                    if names[i] is None and int(dimid) in dimids:
                        names[i] = dimids[int(dimid)]
            except Exception:
                pass
        used: list[str] = [n for n in names if n]
        out = []
        shape = list(d.shape) + [0] * extra
        for i in range(ndim + extra):
            if i < ndim and names[i]:
                out.append(names[i])
            else:
                out.append(self._phony_dim(path, shape[i] if i < ndim else -1 - i, used))
            used.append(out[-1])
        return out

    def _phony_dim(self, path: str, size: int, used: list[str]) -> str:
        group = posixpath.dirname(path) or "/"
        dims = self._phony.setdefault(group, [])
        for name, s in dims:
            if s == size and name not in used:
                return name
        name = f"phony_dim_{len(dims)}"
        dims.append((name, size))
        return name

    # -- contiguous
    def _contiguous(self, d: h5py.Dataset, node: ArrayNode, nd: np.dtype) -> ArrayNode:
        dsid = d.id
        # Unwritten storage: get_offset() is None, or userblock-1 when there is a user block.
        offset = dsid.get_offset() if dsid.get_storage_size() else None
        itemsize = nd.itemsize
        shape = node.shape
        nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
        node.chunks = tuple(max(1, s) for s in shape)
        if offset is None or nbytes == 0:
            return node  # never written: every element is the fill value
        stored = dsid.get_storage_size()
        if stored < nbytes:
            raise self.fail(node.path, f"contiguous storage holds {stored} bytes, expected {nbytes}")
        self._split_contiguous(node, self.url, int(offset), nbytes, itemsize, None)
        if self._want_sample_check() and not self._contiguous_agrees(d, node, nd, int(offset)):
            node.refs = None
            node.inline.clear()
            return self._inline_decoded(d, node, codecs.DTypePlan(node.dtype, True, node.kind, numpy_dtype=nd),
                                        "stored bytes differ from what libhdf5 reads (damaged layout message?)")
        return node

    def _contiguous_agrees(self, d: h5py.Dataset, node: ArrayNode, nd: np.dtype, offset: int) -> bool:
        """Compare the first rows (up to 64 KiB) of contiguous storage with libhdf5's values."""
        shape = node.shape
        row = nd.itemsize * int(np.prod(shape[1:], dtype=np.int64)) if shape else nd.itemsize
        if row > 16 * MiB:
            return True  # too large to sample cheaply
        rows = max(1, min(shape[0], (64 << 10) // max(row, 1))) if shape else 1
        raw = self._read_file(None, offset, rows * row)
        strpad = codecs.string_padding(d.id.get_type())
        try:
            buf: Any = raw
            for codec in reversed(codecs.codec_pipeline([strpad] if strpad else None, None)):
                buf = codec.decode(buf)
            got = np.frombuffer(bytes(buf), dtype=nd)
        except Exception:
            return False
        try:
            want = np.asarray(d[:rows] if shape else d[()])
        except Exception:
            return True  # libhdf5 cannot convert these values: nothing to compare the bytes with
        return records_equal(want.reshape(-1) if want.ndim else want.reshape(1), got.reshape(-1)[: want.size])

    def _split_contiguous(self, node: ArrayNode, url: str | None, offset: int, nbytes: int, itemsize: int,
                          file_size: int | None) -> None:
        """Reference contiguous bytes, as virtual C-order chunks when they are large."""
        shape = node.shape
        target = self.opts.contiguous_chunk_bytes or 0
        chunks = list(max(1, s) for s in shape)
        if target and nbytes > target and shape:
            inner = itemsize
            axis = len(shape) - 1
            for axis in range(len(shape) - 1, -1, -1):
                if inner * shape[axis] > target:
                    break
                inner *= shape[axis]
            chunks = [1] * axis + [max(1, target // inner)] + list(shape[axis + 1 :])
            chunks[axis] = min(chunks[axis], shape[axis])
        node.chunks = tuple(chunks)
        grid = [-(-s // c) for s, c in zip(shape, chunks)] or []
        strides = [int(np.prod(shape[i + 1 :], dtype=np.int64)) for i in range(len(shape))]
        chunk_bytes = int(np.prod(chunks, dtype=np.int64)) * itemsize
        if shape:
            idx = np.indices(grid).reshape(len(shape), -1).T.astype(np.int64)
            elem = (idx * np.asarray(chunks, np.int64) * np.asarray(strides, np.int64)).sum(axis=1)
        else:
            idx = np.zeros((1, 0), np.int64)
            elem = np.zeros(1, np.int64)
        offsets = (offset + elem * itemsize).astype(np.uint64)
        sizes = np.full(len(offsets), chunk_bytes, dtype=np.uint64)
        end = offset + nbytes
        limit = file_size if file_size is not None else self.file_size
        over = offsets + sizes > np.uint64(limit)
        table = ChunkTable(idx, offsets, sizes, url)
        if over.any():
            # The last chunk runs past the end of the file: store it inline, padded.
            for i in np.nonzero(over)[0]:
                start = int(offsets[i])
                raw = self._read_file(url, start, min(end, limit) - start)
                node.inline[chunk_key(idx[i])] = raw + b"\0" * (chunk_bytes - len(raw))
            table = table.take(~over)
        node.refs = table

    def _read_file(self, url: str | None, start: int, length: int) -> bytes:
        return self.read_many(None if url in (None, self.url) else url, [start], [length])[0]

    # -- chunked
    def _chunked(self, d: h5py.Dataset, node: ArrayNode, plan: codecs.DTypePlan, nd: np.dtype, dcpl,
                 strpad: dict | None = None) -> ArrayNode:
        dsid = d.id
        chunks = tuple(int(c) for c in dcpl.get_chunk()) + plan.extra_shape
        node.chunks = chunks
        itemsize = nd.itemsize
        chunk_nbytes = int(np.prod(chunks, dtype=np.int64)) * itemsize
        flist = codecs.filter_list(dcpl)
        try:
            node.filters, node.compressor = codecs.pipeline(flist, itemsize, chunk_nbytes)
        except codecs.NoCodec as e:
            return self._inline_decoded(d, node, plan, str(e))
        if strpad:  # applied last when reading: after every HDF5 filter is undone
            node.filters = [strpad] + (node.filters or [])
        table, masks = self._chunk_table(d, len(node.shape) - len(plan.extra_shape), chunks, plan.extra_shape)
        # Chunks left beyond the current extent (a dataset shrunk after writing) hold no elements.
        grid = np.asarray([-(-n // c) for n, c in zip(node.shape, chunks)], dtype=np.int64)
        inside = (table.coords < grid).all(axis=1) if len(table) else np.zeros(0, bool)
        why = self._damaged_table(table)
        if why:
            raise self.fail(node.path, f"damaged chunk index: {why}", RefindexError)
        if not inside.all():
            # libhdf5 reports chunk positions outside the extent: its chunk index and its
            # read path disagree (seen with extensible-array indexes from older writers),
            # so only values read through libhdf5 are trustworthy.
            return self._inline_decoded(d, node, plan, "chunk index lists chunks outside the dataset extent")
        if self._lookups_disagree(d, table, chunks):
            return self._inline_decoded(d, node, plan, "the chunk index finds other chunks by position than it "
                                        "lists (damaged chunk index?)")
        odd_edges = self._unfiltered_edge_chunks(d, node, table, chunk_nbytes, nd)
        masks = masks | odd_edges.astype(np.uint32)
        odd = masks != 0
        small = table.sizes < np.uint64(self.opts.inline_threshold)
        if odd.any():
            # Chunks written with some filters skipped: decode them with h5py and store
            # them inline encoded with the array's full pipeline.
            try:
                for i in np.nonzero(odd)[0]:
                    key = table.coords[i]
                    node.inline[chunk_key(key)] = self._reencode_chunk(d, node, key, nd)
            except NotImplementedError:  # a decode-only codec (bitshuffle): inline all values
                node.inline.clear()
                return self._inline_decoded(d, node, plan, "chunks written with filters skipped, and the "
                                            "pipeline cannot re-encode them")
        tiny = np.nonzero(small & ~odd)[0]
        if len(tiny) <= BULK_INLINE:
            # libhdf5 looks each chunk up by its position: the bytes its own reads use.
            for i in tiny:
                coord = table.coords[i]
                node.inline[chunk_key(coord)] = bytes(dsid.read_direct_chunk(_origin(coord, chunks, len(d.shape)))[1])
        else:  # many tiny chunks: a few merged reads instead of a libhdf5 call each
            datas = self.read_many(None if table.url in (None, self.url) else table.url,
                                   table.offsets[tiny].tolist(), table.sizes[tiny].tolist())
            for coord, raw in zip(table.coords[tiny].tolist(), datas):
                node.inline[chunk_key(coord)] = raw
            if self._want_sample_check():
                for i in sorted({0, len(tiny) // 2, len(tiny) - 1}):
                    if not self._chunk_agrees(d, node, nd, table.coords[tiny[i]], datas[i]):
                        node.inline.clear()
                        return self._inline_decoded(d, node, plan, "a stored chunk decodes to other values "
                                                    "than libhdf5 reads (damaged chunk index?)")
        node.refs = table.take(~(odd | small))
        if self._want_sample_check() and len(node.refs):
            n = len(node.refs)
            for i in sorted({0, n // 2, n - 1}):  # first, middle and last stored chunk
                coord = node.refs.coords[i]
                raw = self._read_file(None, int(node.refs.offsets[i]), int(node.refs.sizes[i]))
                if not self._chunk_agrees(d, node, nd, coord, raw):
                    node.inline.clear()
                    node.refs = None
                    return self._inline_decoded(d, node, plan, "a stored chunk decodes to other values than "
                                                "libhdf5 reads (damaged chunk index?)")
        return node

    def _damaged_table(self, table: ChunkTable) -> str | None:
        """Why a chunk table cannot describe real chunks (a damaged file), or None."""
        if not len(table):
            return None
        step = 1 << 20  # checked a million rows at a time: temporaries stay small for 10^7 chunks
        end = np.uint64(self.file_size)
        for lo in range(0, len(table), step):
            sizes = table.sizes[lo:lo + step]
            if (sizes == 0).any():
                return "a chunk of size 0"
            if ((sizes > end) | (table.offsets[lo:lo + step] > end - np.minimum(sizes, end))).any():  # no overflow
                return "a chunk beyond the end of the file"
        c = table.coords
        span = c.max(axis=0).astype(np.float64) + 1
        if float(np.prod(span)) < 2**62:  # linear chunk numbers: one int64 sort
            dims = tuple(int(x) for x in span)
            ordered, last = True, -1
            for lo in range(0, len(c), step):  # B-tree order is C order: then sorted, without duplicates
                part = np.ravel_multi_index(tuple(c[lo:lo + step].T), dims)
                if part[0] <= last or not bool((part[1:] > part[:-1]).all()):
                    ordered = False
                    break
                last = int(part[-1])
            if ordered:
                dup = False
            else:
                linear = np.ravel_multi_index(tuple(c.T), dims)
                s = np.sort(linear)  # ~20x faster than np.unique's hashing for 10^5+ chunks
                dup = bool((s[1:] == s[:-1]).any())
        else:
            dup = len(np.unique(c, axis=0)) != len(c)
        if dup:
            return "the same chunk listed twice"
        return None

    def _lookups_disagree(self, d: h5py.Dataset, table: ChunkTable, chunks) -> bool:
        """Does libhdf5's read path find other bytes than ``chunk_iter`` listed for some chunk?

        libhdf5 reads a chunk by looking its position up in the index; a damaged index can
        list a chunk that the lookup misses (libhdf5 then reads fill values there) or finds
        elsewhere.  ``read_direct_chunk`` goes through that lookup: all chunks of small tables
        are compared with the listed bytes, an even sample of larger ones, within a byte budget.
        Local files by default, like the decode sample check (remotely each read is a request).
        """
        n = len(table)
        if not n or not self._want_sample_check():
            return False
        ndim = len(d.shape)
        mean = max(1, int(table.sizes.mean()))
        k = max(3, min(n, LOOKUP_SAMPLE, LOOKUP_BUDGET // mean))
        rows = sorted(set(np.linspace(0, n - 1, k).astype(np.int64).tolist()))
        for i in rows:
            try:
                _, raw = d.id.read_direct_chunk(_origin(table.coords[i].tolist(), chunks, ndim))
            except Exception:
                return True  # "chunk storage is not allocated": the lookup misses a listed chunk
            if len(raw) != int(table.sizes[i]) or bytes(raw) != self._read_file(None, int(table.offsets[i]), len(raw)):
                return True
        return False

    def _want_sample_check(self) -> bool:
        opt = self.opts.check_sample
        return (not self.remote) if opt is None else bool(opt)

    @property
    def remote(self) -> bool:
        """Is the scanned file read through fsspec from another machine (not a local path)?"""
        return "://" in self.label and not self.label.startswith("file://")

    def _chunk_agrees(self, d: h5py.Dataset, node: ArrayNode, nd: np.dtype, coord, raw: bytes) -> bool:
        """Does ``raw`` (one chunk as stored) decode with the array's pipeline to libhdf5's values?"""
        ndim = len(d.shape)
        try:
            buf: Any = raw
            for codec in reversed(codecs.codec_pipeline(node.filters, node.compressor)):
                buf = codec.decode(buf)
            got = np.frombuffer(bytes(buf), dtype=nd).reshape(node.chunks)
        except Exception:
            return False
        sel = tuple(slice(int(c) * s, min((int(c) + 1) * s, n)) for c, s, n in zip(coord[:ndim], node.chunks, d.shape))
        try:
            want = np.asarray(d[sel])
        except Exception:
            return True  # libhdf5 cannot convert these values: nothing to compare the bytes with
        return records_equal(want, got[tuple(slice(0, x.stop - x.start) for x in sel)])

    def _unfiltered_edge_chunks(self, d, node: ArrayNode, table: ChunkTable, chunk_nbytes: int, nd) -> np.ndarray:
        """Partial edge chunks stored without filters (H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS).

        h5py does not expose that dataset option, and such chunks report filter_mask 0.
        They have exactly the raw chunk size, so only those candidates are decoded with
        the array's pipeline and compared with libhdf5's values.
        """
        flags = np.zeros(len(table), dtype=bool)
        if not (node.filters or node.compressor) or not len(table) or not d.shape:
            return flags
        ndim = len(d.shape)
        chunks = np.asarray(node.chunks[:ndim], np.int64)
        shape = np.asarray(d.shape, np.int64)
        if not (shape % chunks).any():
            return flags  # the chunks tile the extent: no partial edge chunk
        partial = (((table.coords[:, :ndim] + 1) * chunks) > shape).any(axis=1)
        cands = np.nonzero(partial & (table.sizes == np.uint64(chunk_nbytes)))[0]
        if not len(cands):
            return flags
        for i in cands:
            coord = table.coords[i]
            raw = bytes(d.id.read_direct_chunk(_origin(coord, node.chunks, ndim))[1])  # through h5py's own (cached) reads
            flags[i] = not self._chunk_agrees(d, node, nd, coord, raw)
        return flags

    def _chunk_table(self, d: h5py.Dataset, ndim: int, chunks, extra) -> tuple[ChunkTable, np.ndarray]:
        """One pass of ``chunk_iter`` into numpy columns (no per-chunk Python objects kept).

        The callback only extends a short list with each ``StoreInfo``; every 1,024 chunks
        the list goes into numpy/``array.array`` columns (grid coordinates, filter masks,
        byte offsets, sizes) that numpy views without a copy at the end.  Coordinates go
        straight into an array sized for the chunk grid, up to ``GRID_PREALLOCATE`` rows
        (pages the OS maps only when written); chunks beyond that (huge grids, or an index
        listing more chunks than the grid holds) grow in an ``array.array``.  Memory stays
        near 8 bytes per integer kept (about 40 bytes a chunk for 2-D data) and the
        per-chunk Python work is one list extend.
        """
        pending: list = []
        extend = pending.extend
        grid = int(np.prod([-(-int(s) // int(c)) for s, c in zip(d.shape[:ndim], chunks[:ndim])], dtype=np.float64))
        table = np.empty((max(0, min(grid, GRID_PREALLOCATE)), ndim), np.int64)
        filled = 0
        overflow = array.array("q")  # row-major element offsets beyond ``table``
        columns = [array.array(_U32), array.array("Q"), array.array("Q")]  # filter mask, byte offset, size
        limit = 4 * 1024  # small batches: the tuples freed at each flush are reused at once

        def flush() -> None:
            nonlocal filled
            if not pending:
                return
            starts = pending[0::4]
            m = len(starts)
            room = 0 if overflow else min(m, len(table) - filled)
            block = table[filled:filled + m] if room == m else np.empty((m, ndim), np.int64)
            for i in range(ndim):  # a dimension at a time: faster than flattening the tuples
                block[:, i] = np.fromiter(map(itemgetter(i), starts), np.int64, count=m)
            if room < m:  # the table is full: the rest grows in ``overflow``
                table[filled:filled + room] = block[:room]
                overflow.frombytes(memoryview(block[room:]).cast("B"))
            filled += room
            for i, col in enumerate(columns):
                col.fromlist(pending[1 + i::4])
            pending.clear()
            self.progress.chunks(m)

        def cb(info) -> None:
            extend(info)  # chunk_offset, filter_mask, byte_offset, size
            if len(pending) >= limit:
                flush()

        # The collector would scan the pending StoreInfo tuples again and again: nothing
        # here forms reference cycles, so it is paused for the pass.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            d.id.chunk_iter(cb)
        finally:
            if was_enabled:
                gc.enable()
        flush()
        n = len(columns[0])
        coords = table[:filled] if 2 * filled >= len(table) else table[:filled].copy()  # sparse: free the rest
        del table
        if overflow:
            coords = np.concatenate([coords, np.frombuffer(overflow, np.int64).reshape(-1, ndim)])
        coords //= np.asarray(chunks[:ndim], np.int64)  # element offsets -> grid indices, in place
        if extra:  # trailing dimensions of string-as-array types: always chunk 0
            coords = np.concatenate([coords, np.zeros((n, len(extra)), np.int64)], axis=1)
        masks, offsets, sizes = (np.frombuffer(c, np.dtype(c.typecode)) if n else np.zeros(0, np.dtype(c.typecode))
                                 for c in columns)
        return ChunkTable(coords, offsets, sizes, None), masks

    def _reencode_chunk(self, d: h5py.Dataset, node: ArrayNode, coord, nd: np.dtype) -> bytes:
        ndim = len(d.shape)
        sel = tuple(slice(int(c) * s, min((int(c) + 1) * s, n)) for c, s, n in zip(coord[:ndim], node.chunks, d.shape))
        data = d[sel]
        full = np.full(node.chunks, self._fillvalue(d, nd), dtype=nd) if nd.names is None else np.zeros(node.chunks, nd)
        full[tuple(slice(0, s.stop - s.start) for s in sel)] = data
        return codecs.encode_chunk(full, node.filters, node.compressor)

    # -- values that must be inlined
    def _check_inline_size(self, node: ArrayNode, nbytes: int, why: str) -> None:
        if nbytes > self.opts.inline_max:
            raise self.fail(
                node.path,
                f"{why}; its {nbytes} bytes exceed the inline limit of {self.opts.inline_max} "
                "(raise inline_max / --inline-max to index it inline)",
            )

    def _read_all(self, d: h5py.Dataset, node: ArrayNode, why: str | None = None) -> np.ndarray:
        try:
            return np.asarray(d[...])
        except Exception as e:
            prefix = f"{why}, and " if why else ""
            raise self.fail(node.path, f"{prefix}h5py cannot read the values either: {e}") from e

    def _inline_decoded(self, d: h5py.Dataset, node: ArrayNode, plan: codecs.DTypePlan, why: str) -> ArrayNode:
        """Values read by h5py (decoded) stored inline, zlib-compressed."""
        if not plan.raw:
            return self._inline_converted(d, node, plan, why)
        nd = plan.numpy_dtype if plan.numpy_dtype is not None else d.dtype
        self._check_inline_size(node, int(np.prod(node.shape, dtype=np.int64)) * nd.itemsize, why)
        data = self._read_all(d, node, why)
        nd = codecs.packed_dtype(nd)
        data = np.ascontiguousarray(data, dtype=nd).reshape(node.shape)
        node.dtype = codecs._descr(nd)
        node.fill_value = codecs.fill_value_json(self._fillvalue(d, nd), nd)
        node.filters, node.compressor = None, {"id": "zlib", "level": 1}
        node.attrs["refindex_inlined"] = why
        self._store_inline(node, data)
        return node

    def _inline_converted(self, d: h5py.Dataset, node: ArrayNode, plan: codecs.DTypePlan, why: str | None = None) -> ArrayNode:
        data = self._read_all(d, node, why)
        conv = plan.convert(data)
        if plan.object_codec is not None:
            est = sum(len(v) if isinstance(v, (str, bytes)) else getattr(v, "nbytes", 8) for v in conv.reshape(-1))
        else:
            est = conv.nbytes
        self._check_inline_size(node, est, why or "variable-length values must be stored inline")
        if plan.object_codec is not None and plan.object_codec["id"] == "vlen-utf8":
            node.dtype = "|O"
            node.filters = [dict(plan.object_codec)]
            node.fill_value = None
        elif plan.object_codec is not None:
            node.dtype = "|O"
            node.filters = [dict(plan.object_codec)]
            node.fill_value = None
        else:
            node.dtype = codecs._descr(conv.dtype)
            node.fill_value = codecs.fill_value_json(np.zeros((), conv.dtype)[()], conv.dtype)
            node.filters = None
        node.compressor = {"id": "zlib", "level": 1}
        if why:
            node.attrs["refindex_inlined"] = why
        self._store_inline(node, conv.reshape(node.shape))
        return node

    def _store_inline(self, node: ArrayNode, data: np.ndarray, target: int = 4 * MiB) -> None:
        """Split ``data`` into row chunks of about ``target`` bytes, encode and keep them."""
        shape = node.shape
        if not shape:
            node.chunks = ()
            node.inline["0"] = self._encode(node, data.reshape(()))
            return
        if data.size == 0:
            node.chunks = tuple(max(1, s) for s in shape)
            return
        row = max(1, data[0:1].nbytes if data.dtype != object else 64 * int(np.prod(shape[1:], dtype=np.int64)))
        rows = max(1, min(shape[0], target // row))
        node.chunks = (rows,) + tuple(max(1, s) for s in shape[1:])
        rest = (0,) * (len(shape) - 1)
        for i, start in enumerate(range(0, shape[0], rows)):
            block = data[start : start + rows]
            if block.shape[0] < rows:  # zarr chunks are full size; pad the edge chunk
                pad = np.empty((rows - block.shape[0],) + block.shape[1:], dtype=block.dtype)
                if block.dtype == object:
                    pad[...] = "" if node.filters and node.filters[0]["id"] == "vlen-utf8" else (
                        b"" if node.filters and node.filters[0]["id"] == "vlen-bytes" else np.zeros(0, dtype=block.dtype))
                    if node.filters and node.filters[0]["id"] == "vlen-array":
                        for j in np.ndindex(pad.shape):
                            pad[j] = np.zeros(0, dtype=node.filters[0]["dtype"])
                else:
                    pad[...] = np.zeros((), block.dtype)
                block = np.concatenate([block, pad])
            node.inline[chunk_key((i,) + rest)] = self._encode(node, block)

    def _encode(self, node: ArrayNode, block: np.ndarray) -> bytes:
        return codecs.encode_chunk(block, node.filters, node.compressor)

    # -- external raw storage
    def _external(self, d: h5py.Dataset, node: ArrayNode, plan: codecs.DTypePlan, dcpl) -> ArrayNode:
        """Contiguous data kept in other files (H5Pset_external)."""
        if not plan.raw:
            raise self.fail(node.path, "external storage of non-fixed-size data")
        nd = plan.numpy_dtype if plan.numpy_dtype is not None else d.dtype
        node.fill_value = codecs.fill_value_json(self._fillvalue(d, nd), nd)
        nbytes = int(np.prod(node.shape, dtype=np.int64)) * nd.itemsize
        segments = [(seg_name.decode("utf-8") if isinstance(seg_name, bytes) else seg_name, seg_offset, seg_size)
                    for seg_name, seg_offset, seg_size in map(dcpl.get_external, range(dcpl.get_external_count()))]
        base = posixpath.dirname(self.url) if "://" in self.url else os.path.dirname(self.url)
        name, offset, size = segments[0]
        from .safety import resolve_inside

        for seg_name, _, _ in segments:  # refuse before touching any of them
            resolve_inside(seg_name, self.url, allowed_root=self.opts.allowed_root,
                           allow_outside=self.opts.allow_outside, what="external raw storage file",
                           file=self.label, path=node.path)
        if len(segments) == 1 or size >= nbytes:
            url = self._external_url(base, name)
            file_size = self._external_size(url, node)
            if file_size - offset < nbytes:
                return self._inline_decoded(d, node, plan, "external raw storage file is shorter than the data")
            self._split_contiguous(node, url, int(offset), nbytes, nd.itemsize, file_size)
            node.attrs["refindex_external_storage"] = name
            strpad = codecs.string_padding(d.id.get_type())
            if strpad:
                node.filters = [strpad]
            return node
        return self._external_segments(d, node, nd, segments, base, nbytes)

    @staticmethod
    def _external_url(base: str, name: str) -> str:
        return name if name.startswith("/") or "://" in name else posixpath.join(base, name)

    def _external_segments(self, d: h5py.Dataset, node: ArrayNode, nd: np.dtype, segments, base: str,
                           nbytes: int) -> ArrayNode:
        """Contiguous data spread over several external files, read here and stored inline.

        Not through libhdf5: it looks for external files in the working directory (for a
        remote file there is no other place), so it could read an unrelated file of the same
        name.  The files beside the scanned one are read like the single-file case references
        them; as libhdf5 does, bytes past the end of a file read as zeros.  ``segments`` holds
        (decoded name, offset, size) triples.
        """
        self._check_inline_size(node, nbytes, "external raw storage spread over several files is stored inline")
        parts: list[bytes] = []
        need = nbytes
        for seg_name, seg_offset, seg_size in segments:
            if need <= 0:
                break
            url = self._external_url(base, seg_name)
            take = min(need, int(seg_size))  # the last segment may be H5F_UNLIMITED
            avail = max(0, min(take, self._external_size(url, node) - int(seg_offset)))
            data = self._read_file(url, int(seg_offset), avail) if avail else b""
            if len(data) != avail:
                raise self.fail(node.path, f"short read of external raw storage file {url}", RefindexError)
            parts.append(data + bytes(take - avail))
            need -= take
        if need > 0:
            raise self.fail(node.path, "external raw storage segments hold fewer bytes than the dataset",
                            RefindexError)
        values = np.frombuffer(b"".join(parts), dtype=nd).reshape(node.shape)
        strpad = codecs.string_padding(d.id.get_type())
        node.filters, node.compressor = ([strpad] if strpad else None), {"id": "zlib", "level": 1}
        node.attrs["refindex_inlined"] = "external raw storage spread over several files"
        node.attrs["refindex_external_storage"] = [seg_name for seg_name, _, _ in segments]
        self._store_inline(node, values)
        return node

    def _external_size(self, url: str, node: ArrayNode) -> int:
        try:
            fs, p = self.fs_for(url)
            return int(fs.size(p))
        except FileNotFoundError as e:
            raise self.fail(node.path, f"external raw storage file {url} is missing", RefindexError) from e


