"""The walk over a file: every object's identity first, then groups, links and datasets in order."""

from __future__ import annotations

import posixpath
import time
from typing import Any

import h5py

from ..codecs import jsonable
from ..checks.compare import object_key
from ..errors import RefindexError, UnsupportedError
from ..model import GroupNode, LinkNode, Tree, is_hdmf_root, join
from ..checks.safety import resolve_inside
from ._attrs import attributes_of, object_id_of
from ._context import ScanContext
from ._dataset import build_array
from ._dims import nc_members
from ._inline import defer_small, read_deferred
from ._objects import member
from ._split import split_worthwhile, walk_split

_NC_DIMENSION_ONLY = "This is a netCDF dimension but not a netCDF variable"


def scan_file(ctx: ScanContext) -> Tree:
    """Walk ``ctx.f`` into ``ctx.tree``: every group, dataset and link, small chunks read at the end.

    Each group is visited on its own (its attributes, links and datasets, not its
    subgroups), in the order of :func:`index_objects`, so the walk can be shared with a
    helper process (:func:`~refindex.scanner.walk_split`); the tree is put in depth-first
    path order afterwards either way.
    """
    t0 = time.perf_counter()
    ctx.tree.root_object_id = object_id_of(ctx.f)
    ctx.nc_view = ctx.opts.convention == "plain" or (ctx.opts.convention == "auto" and not is_hdmf_root(ctx.f.attrs))
    # a name with a backslash is refused (or skipped) by its parent's visit, with all below it
    groups = [p for p in index_objects(ctx) if "\\" not in p]
    if not (split_worthwhile(ctx, groups) and walk_split(ctx, groups, visit_path)):
        for path in groups:
            visit_path(ctx, path)
    in_path_order(ctx.tree)
    read_deferred(ctx)
    ctx.tree.provenance["scan_seconds"] = round(time.perf_counter() - t0, 4)
    return ctx.tree


def visit_path(ctx: ScanContext, path: str) -> None:
    visit_group(ctx, ctx.f if path == "/" else member(ctx.f, path), path)


def path_key(path: str) -> tuple[str, ...]:
    """Sort key of HDF5 paths in depth-first order of sorted names: a group, then its members."""
    return () if path == "/" else tuple(path[1:].split("/"))


def in_path_order(tree: Tree) -> None:
    """Groups, arrays, links and the skipped and omitted lists in depth-first path order
    (the order of a recursive walk), whichever order and process visited them."""
    tree.groups = dict(sorted(tree.groups.items(), key=lambda kv: path_key(kv[0])))
    tree.arrays = dict(sorted(tree.arrays.items(), key=lambda kv: path_key(kv[0])))
    tree.links.sort(key=lambda link: path_key(join(link.parent, link.name)))
    tree.skipped.sort(key=lambda s: path_key(s.get("path") or "/"))
    if "omitted" in tree.provenance:
        tree.provenance["omitted"].sort(key=lambda s: path_key(s["path"]))


def children(ctx: ScanContext, g: h5py.Group, path: str) -> list[str]:
    try:
        names = list(g.keys())
    except Exception as e:
        raise ctx.fail(path, f"cannot list group members: {e}", RefindexError) from e
    if not names and ctx.recorder is not None:
        # h5py lists an empty group without reading its local heap; libhdf5's search for the
        # name of an object opened by reference (h5py's ``.name``) reads every group's: the
        # pages of the index must hold it too.
        g.id.links.iterate(lambda name: None)
    odd = [n for n in names if not isinstance(n, str)]  # h5py hands back names that are not UTF-8 as bytes
    if odd:
        raise ctx.fail(path, f"a member name is not UTF-8 text ({bytes(odd[0])!r}): it cannot be a zarr key",
                       RefindexError)
    return sorted(names)


def link_value(ctx: ScanContext, g: h5py.Group, name: str, child: str) -> tuple[str, str | None]:
    """(target path, file name or None) of a soft or external link, as stored.

    Read from libhdf5 rather than h5py's link objects, which turn bytes that are not UTF-8
    into ``"b'...'"`` (soft links) or replacement characters (file names).
    """
    try:
        raw = g.id.links.get_val(name.encode("utf-8"))
    except Exception as e:
        raise ctx.fail(child, f"cannot read link: {e}", RefindexError) from e
    parts = {"target path": raw} if isinstance(raw, bytes) else {"file name": raw[0], "target path": raw[1]}
    text = {}
    for what, value in parts.items():
        try:
            text[what] = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise ctx.fail(child, f"the link's {what} is not UTF-8 text ({bytes(value)!r}): "
                           "an index cannot name it") from None
    return text["target path"], text.get("file name")


def index_objects(ctx: ScanContext) -> list[str]:
    """First pass over hard links: the canonical (first, sorted depth-first) path of every
    object; returns the canonical paths of the groups, depth-first."""
    stack: list[tuple[str, Any]] = [("/", ctx.f)]
    ctx.canonical[object_key(ctx.f)] = "/"
    datasets = 0
    groups: list[str] = []
    while stack:
        path, g = stack.pop()
        groups.append(path)
        kids = []
        for name in children(ctx, g, path):
            try:
                info = g.id.links.get_info(name.encode("utf-8"))
            except Exception as e:
                raise ctx.fail(join(path, name), f"cannot read link: {e}", RefindexError) from e
            if info.type != h5py.h5l.TYPE_HARD:
                continue
            child = join(path, name)
            try:  # the object's identity without opening it (what object_key reads from an open one)
                st = h5py.h5g.get_objinfo(g.id, name.encode("utf-8"))
                key = (st.fileno, st.objno)
                if key in ctx.canonical:
                    continue
                ctx.canonical[key] = child
                if st.type == h5py.h5g.GROUP:
                    kids.append((child, member(g, name)))
                elif st.type == h5py.h5g.DATASET:
                    datasets += 1
            except Exception as e:
                raise ctx.fail(child, f"cannot open object: {e}", RefindexError) from e
        stack.extend(reversed(kids))
    ctx.progress.start(datasets)
    return groups


def visit_group(ctx: ScanContext, g: h5py.Group, path: str) -> None:
    """One group: its attributes, links and datasets (its subgroups are visited on their own)."""
    types: dict[str, str] = {}
    attrs = attributes_of(ctx, g, path, types)
    oid = attrs.get("object_id")  # read with the others: opening it again costs as much
    ctx.tree.groups[path] = GroupNode(path, attrs, oid if isinstance(oid, str) else object_id_of(g), types)
    opened: dict[str, h5py.Dataset] = {}  # datasets met here, for netCDF's view
    for name in children(ctx, g, path):
        child = join(path, name)
        if "\\" in name:
            # zarr reads "\\" in a key as "/": the object would vanish from the index.
            err = ctx.fail(child, "names containing a backslash cannot be zarr keys")
            if ctx.opts.on_unsupported == "skip":
                ctx.tree.skipped.append({"path": child, "reason": err.reason})
                continue
            raise err
        info = g.id.links.get_info(name.encode("utf-8"))
        if info.type in (h5py.h5l.TYPE_SOFT, h5py.h5l.TYPE_EXTERNAL):
            try:
                ctx.tree.links.append((soft_link if info.type == h5py.h5l.TYPE_SOFT else external_link)(
                    ctx, g, name, path))
            except UnsupportedError as err:  # a link value an index cannot hold
                if ctx.opts.on_unsupported != "skip":
                    raise
                ctx.tree.skipped.append({"path": child, "reason": err.reason})
            continue
        if info.type != h5py.h5l.TYPE_HARD:
            ctx.tree.links.append(LinkNode(name, path, "user-defined", None, resolved=False))
            continue
        obj = member(g, name)
        if isinstance(obj, h5py.Dataset):
            opened[name] = obj
        canon = ctx.canonical.get(object_key(obj))
        if canon != child:
            ctx.tree.links.append(LinkNode(name, path, "hard", canon, target_object_id=object_id_of(obj)))
            continue
        if isinstance(obj, h5py.Group):
            continue  # in the list index_objects made: visited on its own
        elif isinstance(obj, h5py.Dataset) and netcdf_dimension_only(obj):
            # A netCDF-4 dimension without a variable is a placeholder scale with no data;
            # as an array, xarray would show it as a bogus coordinate.  The dimension
            # survives as a name in _ARRAY_DIMENSIONS of the arrays that use it.
            ctx.tree.provenance.setdefault("omitted", []).append(
                {"path": child, "reason": "netCDF dimension without a variable (holds no data)"})
        elif isinstance(obj, h5py.Dataset):
            visit_dataset(ctx, obj, child)
        # Committed datatypes hold no data; they are not part of the zarr view.
    ctx.tree.groups[path].nc_members = nc_members(ctx, g, opened)  # every convention names dimensions so


def netcdf_dimension_only(d: h5py.Dataset) -> bool:
    """The placeholder scale netCDF-4 writes for a dimension that has no coordinate variable."""
    try:
        if "NAME" not in d.attrs or not h5py.h5ds.is_scale(d.id) or d.id.get_storage_size():
            return False  # only never-written placeholders: anything with stored bytes is kept
        return str(jsonable(d.attrs["NAME"])).startswith(_NC_DIMENSION_ONLY)
    except Exception:
        return False


def soft_link(ctx: ScanContext, g: h5py.Group, name: str, parent: str) -> LinkNode:
    written, _ = link_value(ctx, g, name, join(parent, name))
    target = written if written.startswith("/") else posixpath.normpath(join(parent, written))
    try:
        obj = member(g, name)
    except Exception:
        obj = None
    if obj is None:
        return LinkNode(name, parent, "soft", target, resolved=False)
    return LinkNode(name, parent, "soft", ctx.canonical_path(obj), target_object_id=object_id_of(obj))


def followed(ctx: ScanContext, g: h5py.Group, name: str) -> Any:
    """The object an external link leads to.  A local file read through a file object (a scan that
    records its pages) would make libhdf5 open the other file through that same object (the
    parent's file access properties): there the other file is opened by its own path instead."""
    if ctx.remote or getattr(ctx.f, "driver", None) != "fileobj":
        return g[name]
    lapl = h5py.h5p.create(h5py.h5p.LINK_ACCESS)
    lapl.set_elink_fapl(h5py.h5p.create(h5py.h5p.FILE_ACCESS))
    oid = h5py.h5o.open(g.id, name.encode("utf-8"), lapl=lapl)
    return h5py.Group(oid) if isinstance(oid, h5py.h5g.GroupID) else h5py.Dataset(oid)


def external_link(ctx: ScanContext, g: h5py.Group, name: str, parent: str) -> LinkNode:
    """An external link; when libhdf5 can open the other file, its target's ids are recorded too."""
    target, filename = link_value(ctx, g, name, join(parent, name))
    node = LinkNode(name, parent, "external", target, file=filename, resolved=False)
    try:  # libhdf5 opens the other file to resolve the link: only inside the allowed root
        resolve_inside(filename, ctx.url, allowed_root=ctx.opts.allowed_root,
                       allow_outside=ctx.opts.allow_outside)
    except RefindexError:
        return node
    try:
        obj = followed(ctx, g, name)
    except Exception:  # the other file is missing or unreachable: keep the link unresolved
        return node
    node.resolved = True
    node.target_object_id = object_id_of(obj)
    node.target_root_object_id = object_id_of(obj.file)
    return node


def visit_dataset(ctx: ScanContext, d: h5py.Dataset, path: str) -> None:
    """Index one dataset; what cannot be represented fails, or is recorded with ``on_unsupported="skip"``."""
    try:
        try:
            node = build_array(ctx, d, path)
        except RefindexError as e:
            if ctx.opts.on_unsupported != "skip":
                raise
            ctx.tree.skipped.append({"path": path, "reason": e.reason})
            return
        except Exception as e:
            err = ctx.fail(path, f"{type(e).__name__}: {e}")
            if ctx.opts.on_unsupported != "skip":
                raise err from e
            ctx.tree.skipped.append({"path": path, "reason": err.reason})
            return
        defer_small(ctx, node)
        ctx.tree.arrays[path] = node
    finally:
        ctx.progress.dataset_done()
