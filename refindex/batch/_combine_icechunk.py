"""The combined dataset into an Icechunk repository: one zarr v3 dataset of virtual references, one commit.

``run_batch(..., format="icechunk", combine=REPO)``: the files are indexed as JSON (beside them,
or under ``output``) and their manifest says which are new or changed, so a re-run with more
inputs scans only those; the combine is made again from the saved state's digests of the
unchanged files and the new files' indexes (:mod:`._combine_state`) and replaces the repository's
root dataset in **one new commit** (Icechunk's writer: :func:`refindex.formats.icechunk.write_icechunk`).  A file that
changed gets its new references; an input of the previous run that is gone fails the run
naming it, before anything is written.  The arrays become v3 documents as a v3 index's do:
dimension names in ``dimension_names``, ``_FillValue`` in xarray's v3 encoding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import RefindexError
from ._combine_layout import OutArray, OutLayout


def node_of(name: str, a: OutArray, urls: list[str], inline: bytes) -> Any:
    """The v3 array node of one combined array (references as a chunk table, small chunks inline)."""
    from ..conventions._plain3 import xarray_fill_attr
    from ..model import ArrayNode, ChunkTable

    za = a.zarray
    ndim = len(za["shape"])
    attrs = {k: v for k, v in a.zattrs.items() if k != "_ARRAY_DIMENSIONS"}
    ref = a.url >= 0
    coords = np.ascontiguousarray(a.coords[:, :ndim], dtype=np.int64)
    table = None
    if ref.any():
        table = ChunkTable(coords[ref], a.offset[ref].astype(np.uint64), a.size[ref].astype(np.uint64),
                           None, list(urls), a.url[ref].astype(np.int32))
    blob = memoryview(inline)
    held = {(".".join(map(str, pos)) if ndim else "0"): bytes(blob[o:o + s])
            for pos, o, s in zip(coords[~ref].tolist(), a.offset[~ref].tolist(), a.size[~ref].tolist())}
    node = ArrayNode(path="/" + name, shape=tuple(za["shape"]), chunks=tuple(za["chunks"]), dtype=za["dtype"],
                     fill_value=za["fill_value"], compressor=za["compressor"], filters=za["filters"], attrs=attrs,
                     refs=table, inline=held, dimension_names=list(a.zattrs.get("_ARRAY_DIMENSIONS") or []))
    if "_FillValue" in attrs:
        xarray_fill_attr(node)
    return node


def tree_of(out: OutLayout, provenance: dict[str, Any]) -> Any:
    from ..model import GroupNode, Tree

    arrays = {"/" + n: node_of(n, a, out.urls, out.inline) for n, a in sorted(out.arrays.items())}
    return Tree(url=out.urls[0] if out.urls else "", groups={"/": GroupNode("/", attrs=dict(out.attrs))},
                arrays=arrays, provenance=provenance)


def write_combined_icechunk(out: OutLayout, target: Any, sources: list[str]) -> str:
    """Replace the root dataset of ``target``'s branch with ``out``, one commit; returns the snapshot id."""
    from .. import __version__
    from ..formats.icechunk import write_icechunk

    prov = {"combined": {"files": out.files, "sources": len(sources)}}
    summary = write_icechunk(tree_of(out, prov), target, version=__version__)
    return str(summary["snapshot"])


def branch_tip(target: Any) -> str | None:
    """The snapshot at the tip of ``target``'s branch (what the combine's saved state must match); None when
    there is no repository or branch yet, or it cannot be read."""
    import icechunk as ic

    from ..formats.icechunk import storage_of

    try:
        storage = storage_of(target.repo, target.storage_options)
        if not ic.Repository.exists(storage):
            return None
        return str(ic.Repository.open(storage).lookup_branch(target.branch))
    except Exception:  # noqa: BLE001 - cannot tell: the state is not trusted
        return None


def vanished(gone: list[str]) -> None:
    """Refuse when inputs of the previous run are gone: the dataset would lose their steps silently."""
    if gone:
        raise RefindexError(f"cannot append: {len(gone)} input(s) of the previous run are gone "
                            f"({', '.join(gone[:5])}); combine anew with force=True / --force to drop them")
