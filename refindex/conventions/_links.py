"""Links that are not materialised as arrays or groups: ``zarr_link`` entries on the parent group;
and the further names of hard-linked datasets, materialised (:func:`hard_linked_arrays`).

An entry follows hdmf-zarr's storage spec: ``{"name", "source", "path", "object_id",
"source_object_id"}``, ``source`` being "." for this file or the other file's path
relative to this one (external links); refindex adds ``refindex_link_type`` for links
that are not plain soft/hard links or that could not be resolved.
"""

from __future__ import annotations

import copy
from typing import Any

from .. import urls
from ..model import LinkNode, Tree, join


def link_entry(tree: Tree, link: LinkNode) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": link.name, "source": ".", "path": link.target}
    if link.kind == "external":
        entry["source"] = urls.relative(tree.url, link.file or "")
    if link.target_object_id:
        entry["object_id"] = link.target_object_id
    if tree.root_object_id and link.kind != "external":
        entry["source_object_id"] = tree.root_object_id
    elif link.kind == "external" and link.target_root_object_id:
        entry["source_object_id"] = link.target_root_object_id
    if link.kind not in ("soft", "hard") or not link.resolved:
        entry["refindex_link_type"] = link.kind + ("" if link.resolved else " (unresolved)")
    return entry


def add_zarr_link(tree: Tree, link: LinkNode) -> None:
    group = tree.groups[link.parent]
    group.attrs.setdefault("zarr_link", []).append(link_entry(tree, link))


def hard_linked_arrays(tree: Tree) -> None:
    """Every further name of a hard-linked dataset becomes an array of its own (its chunk references
    and inline bytes shared, not copied) and leaves ``tree.links``.

    HDF5 has no first name: ``HDF5IO`` reads each name as a dataset of its own (hdmf-zarr's
    export writes each), so hdmf must not see a link there (pynwb would read one as, e.g., a
    ``timestamp_link`` the file does not have).  Hard-linked groups stay links.
    """
    kept = []
    for link in tree.links:
        where = join(link.parent, link.name)
        node = tree.arrays.get(link.target or "")
        if link.kind != "hard" or not link.resolved or node is None or where in tree.arrays:
            kept.append(link)
            continue
        new = copy.copy(node)
        new.path, new.attrs, new.attr_types = where, copy.deepcopy(node.attrs), dict(node.attr_types)
        new.inline = dict(node.inline)  # conventions re-encode inline chunks per array
        tree.arrays[where] = new
    if len(kept) != len(tree.links):  # in the walk's depth-first order again
        tree.arrays = dict(sorted(tree.arrays.items(), key=lambda kv: tuple(kv[0][1:].split("/"))))
    tree.links = kept
