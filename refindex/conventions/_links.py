"""Links that are not materialised as arrays or groups: ``zarr_link`` entries on the parent group.

An entry follows hdmf-zarr's storage spec: ``{"name", "source", "path", "object_id",
"source_object_id"}``, ``source`` being "." for this file or the other file's path
relative to this one (external links); refindex adds ``refindex_link_type`` for links
that are not plain soft/hard links or that could not be resolved.
"""

from __future__ import annotations

from typing import Any

from .. import urls
from ..model import LinkNode, Tree


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
