"""The plain convention: every HDF5 name that leads to data stays readable, as netCDF readers show it.

Hard and soft links to datasets become arrays of their own whose chunk references repeat
the target's (the data is never copied); links to groups are materialised the same way
unless that would recurse (a link to an ancestor).  Links that cannot be materialised
(external, dangling, user-defined, recursive) are recorded in the parent group's
``zarr_link`` entries so nothing disappears silently.

Names, dimensions and attributes then take the form xarray shows over the file with
h5netcdf (:mod:`._ncview`), and a v2 index states fill values as xarray reads them
(:mod:`._fills`).  refindex's own notes on nodes go to the provenance (``hidden_attributes``),
never into attributes xarray would show.
"""

from __future__ import annotations

import copy
import posixpath

from ..model import ArrayNode, GroupNode, Tree, join
from ._fills import xarray_fill_values
from ._links import add_zarr_link
from ._ncview import keep_aside, netcdf_view


def apply_plain(tree: Tree) -> None:
    """Rewrite ``tree`` in place for a plain zarr v2 index."""
    plain_view(tree)
    xarray_fill_values(tree)
    keep_aside(tree)


def plain_view(tree: Tree) -> None:
    """What plain indexes of both zarr formats share: links materialised, netCDF's view."""
    materialise_links(tree)
    netcdf_view(tree)


def materialise_links(tree: Tree) -> None:
    pending = sorted(tree.links, key=lambda l: join(l.parent, l.name))
    for link in pending:
        where = join(link.parent, link.name)
        target = link.target
        if link.kind in ("soft", "hard") and link.resolved and target is not None:
            if target in tree.arrays:
                tree.arrays[where] = _clone_array(tree.arrays[target], where, rename_scale=link.kind == "hard")
                tree.arrays[where].attrs["refindex_link"] = {"type": link.kind, "target": target}
                continue
            if target in tree.groups and not _is_ancestor(target, where):
                _clone_group(tree, target, where)
                tree.groups[where].attrs["refindex_link"] = {"type": link.kind, "target": target}
                continue
        if link.parent in tree.groups:
            add_zarr_link(tree, link)


def _is_ancestor(a: str, b: str) -> bool:
    return a == "/" or b == a or b.startswith(a.rstrip("/") + "/")


def _clone_array(node: ArrayNode, path: str, rename_scale: bool = False) -> ArrayNode:
    new = copy.copy(node)
    new.path = path
    new.attrs = copy.deepcopy(node.attrs)
    dims = new.attrs.get("_ARRAY_DIMENSIONS")
    if rename_scale and dims and dims[0] == posixpath.basename(node.path):
        # A dimension scale under another name is a dimension of that name (as netCDF sees it).
        new.attrs["_ARRAY_DIMENSIONS"] = [posixpath.basename(path)] + list(dims[1:])
    return new  # refs and inline bytes are shared, never copied


def _clone_group(tree: Tree, src: str, dst: str) -> None:
    prefix = src.rstrip("/") + "/"
    tree.groups[dst] = _clone_group_node(tree.groups[src], dst)
    for path in [p for p in tree.groups if p.startswith(prefix)]:
        new = dst + "/" + path[len(prefix) :]
        tree.groups[new] = _clone_group_node(tree.groups[path], new)
    for path in [p for p in tree.arrays if p.startswith(prefix)]:
        tree.arrays[dst + "/" + path[len(prefix) :]] = _clone_array(tree.arrays[path], dst + "/" + path[len(prefix) :])


def _clone_group_node(node: GroupNode, path: str) -> GroupNode:
    return GroupNode(path, copy.deepcopy(node.attrs), node.object_id, node.nc_members)
