"""Layout conventions applied to a scanned Tree before it is written.

``plain``: every HDF5 name that leads to data stays readable.  Hard and soft links to
datasets become arrays of their own whose chunk references repeat the target's (the
data is never copied); links to groups are materialised the same way unless that
would recurse (a link to an ancestor).  Links that cannot be materialised (external,
dangling, user-defined, recursive) are recorded in the parent group's ``zarr_link``
attribute so nothing disappears silently.

``hdmf``: the hdmf-zarr storage convention read by ``hdmf_zarr.NWBZarrV2IO``: links
as ``zarr_link`` entries on the parent group, every dataset has ``zarr_dtype``,
scalars stay 0-d, ``.specloc`` is a path string.
"""

from __future__ import annotations

import copy
import os
import posixpath
from typing import Any, Literal

from .model import ArrayNode, GroupNode, LinkNode, Tree, join

Convention = Literal["auto", "hdmf", "plain"]


def detect(tree: Tree) -> str:
    """``"hdmf"`` for files written by HDMF (NWB), else ``"plain"``."""
    root = tree.groups.get("/")
    attrs = root.attrs if root else {}
    if ".specloc" in attrs or ("namespace" in attrs and "neurodata_type" in attrs):
        return "hdmf"
    return "plain"


def apply(tree: Tree, convention: Convention = "auto") -> str:
    """Rewrite ``tree`` in place for ``convention``; returns the convention applied."""
    chosen = detect(tree) if convention == "auto" else convention
    if chosen not in ("hdmf", "plain"):
        raise ValueError(f"unknown convention {convention!r}")
    if chosen == "hdmf":
        _apply_hdmf(tree)
    else:
        _apply_plain(tree)
    tree.provenance["convention"] = chosen
    return chosen


def _link_entry(tree: Tree, link: LinkNode) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": link.name, "source": ".", "path": link.target}
    if link.kind == "external":
        entry["source"] = _relative_source(tree.url, link.file or "")
    if link.target_object_id:
        entry["object_id"] = link.target_object_id
    if tree.root_object_id and link.kind != "external":
        entry["source_object_id"] = tree.root_object_id
    elif link.kind == "external" and link.target_root_object_id:
        entry["source_object_id"] = link.target_root_object_id
    if link.kind not in ("soft", "hard") or not link.resolved:
        entry["refindex_link_type"] = link.kind + ("" if link.resolved else " (unresolved)")
    return entry


def _relative_source(url: str, filename: str) -> str:
    """External-link file as a path relative to the linking file's folder."""
    if "://" in filename:
        return filename
    if os.path.isabs(filename):
        base = os.path.dirname(url) if "://" not in url else None
        if base:
            return os.path.relpath(filename, base)
    return posixpath.normpath(filename)


def _add_zarr_link(tree: Tree, link: LinkNode) -> None:
    group = tree.groups[link.parent]
    group.attrs.setdefault("zarr_link", []).append(_link_entry(tree, link))


# ---------------------------------------------------------------- plain


def _apply_plain(tree: Tree) -> None:
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
            _add_zarr_link(tree, link)


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
    tree.groups[dst] = GroupNode(dst, copy.deepcopy(tree.groups[src].attrs), tree.groups[src].object_id)
    for path in [p for p in tree.groups if p.startswith(prefix)]:
        new = dst + "/" + path[len(prefix) :]
        tree.groups[new] = GroupNode(new, copy.deepcopy(tree.groups[path].attrs), tree.groups[path].object_id)
    for path in [p for p in tree.arrays if p.startswith(prefix)]:
        tree.arrays[dst + "/" + path[len(prefix) :]] = _clone_array(tree.arrays[path], dst + "/" + path[len(prefix) :])


# ---------------------------------------------------------------- hdmf


def _zarr_dtype(kind: Any) -> Any:
    if isinstance(kind, list):
        return [{"name": f["name"], "dtype": _zarr_dtype(f["dtype"])} for f in kind]
    if kind in ("str", "object", "region"):
        return kind
    if kind == "bytes":
        return "bytes"
    return str(kind)


def _apply_hdmf(tree: Tree) -> None:
    for link in sorted(tree.links, key=lambda l: join(l.parent, l.name)):
        if link.parent in tree.groups:
            _add_zarr_link(tree, link)
    root = tree.groups["/"]
    spec = root.attrs.get(".specloc")
    if isinstance(spec, dict) and isinstance(spec.get("value"), dict):
        path = spec["value"].get("path") or ""
        root.attrs[".specloc"] = path.lstrip("/")
    for node in tree.arrays.values():
        # Scalars stay 0-d with their real zarr_dtype: hdmf-zarr 0.14 reads both this and
        # the older shape-(1,) "scalar" form, but only 0-d keeps "object" for scalar
        # references and reads cached specs without falling back to raw chunk reads.
        node.attrs["zarr_dtype"] = _zarr_dtype(node.kind)
