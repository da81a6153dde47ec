"""zarr format 2 as an output format: the object the pipeline and the readers ask about it.

Its documents (``.zgroup``/``.zattrs``/``.zarray`` and ``.zmetadata``) are :mod:`._refs`'s, the
layout the JSON (:mod:`._json`) and parquet (:mod:`._parquet`) writers take by default, loaded
when a document is made: what a reader asks (the consolidated key, attribute rewriting) loads no
writer.  :mod:`.zarr3` has the same surface for format 3, so a caller holds the chosen format
(:func:`refindex.formats.for_zarr`) and never tests a number.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import os

    from ..model import ArrayNode, RefsDocument, Tree

ZARR_FORMAT = 2
CONSOLIDATED = ".zmetadata"
Attributes = dict[str, Any]


class Zarr2:
    """zarr format 2: the convention that fits it, zarr's verdict on an array, the documents, the writers."""

    number = ZARR_FORMAT
    label = "zarr v2"
    consolidated_key: str | None = CONSOLIDATED  # where the index's consolidated metadata is (xarray asks)
    combinable = True  # batch's combine merges indexes of this format
    summary_fields: dict[str, Any] = {}  # a v2 summary says what it always did

    def apply_convention(self, tree: Tree, convention: Any) -> tuple[str, list[tuple[str, str]]]:
        """``tree`` rewritten for ``convention``: (the convention applied, the arrays with no form: none)."""
        from .. import conventions

        return conventions.apply(tree, convention), []

    def codec_names(self, tree: Tree) -> list[str]:
        """The codec ids the arrays of ``tree`` use (the provenance's ``codecs`` list)."""
        from ..codecs import codec_ids
        from ._refs import zarray

        return codec_ids(zarray(a) for a in tree.arrays.values())

    def refusal(self, node: ArrayNode, *, portable: bool) -> str | None:
        """Why an index of this format cannot hold ``node`` (None: it can)."""
        from ..codecs import zarr_refusal
        from ._refs import zarray

        why = zarr_refusal(zarray(node))
        return None if why is None else f"zarr cannot open the array this dataset would become ({why})"

    def stock_codec(self, codec_id: str) -> bool:
        """Does a reader of this format decode the v2 codec ``codec_id`` with numcodecs/imagecodecs alone?"""
        from ..codecs import stock

        return stock(codec_id)

    def head_refs(self, tree: Tree) -> RefsDocument:
        """The index without its chunk entries (what the safety gate reads)."""
        from ._refs import head_refs

        return head_refs(tree)

    def to_refs(self, tree: Tree) -> RefsDocument:
        from ._refs import to_refs

        return to_refs(tree)

    def write_json(self, tree: Tree, path: str | os.PathLike, *, head: RefsDocument) -> dict[str, Any]:
        """The JSON index streamed from the chunk tables; its summary."""
        from ._json import write_json_stream

        return write_json_stream(tree, path, head=head)

    def write_parquet(self, tree: Tree, path: str | os.PathLike, *, record_size: int) -> dict[str, Any]:
        from ._parquet import write_parquet

        return write_parquet(tree, path, record_size=record_size)

    def with_attributes(self, refs: RefsDocument, change: Callable[[Attributes], Attributes]) -> RefsDocument:
        """A copy of ``refs`` with every node's attributes ``change``'d (a ``.zattrs`` that it leaves
        alone keeps its text), ``.zmetadata`` rebuilt from the documents."""
        new: dict[str, Any] = {}
        meta: dict[str, Any] = {}
        for key, value in refs["refs"].items():
            base = key.rsplit("/", 1)[-1]
            if base == CONSOLIDATED:
                continue  # rebuilt below from the rewritten documents
            if base in (".zgroup", ".zarray", ".zattrs"):
                meta[key] = json.loads(value)
            if base == ".zattrs" and isinstance(value, str):
                changed = change(meta[key])
                if changed != meta[key]:
                    meta[key], value = changed, json.dumps(changed, allow_nan=True)
            new[key] = value
        new[CONSOLIDATED] = json.dumps({"metadata": meta, "zarr_consolidated_format": 1}, allow_nan=True)
        return {**refs, "refs": new}

    def documents_in(self, refs: dict[str, Any]) -> tuple[set[str], int]:
        """(the metadata keys, the number of arrays) of an index's ``refs``."""
        meta = {k for k in refs if k.rsplit("/", 1)[-1].startswith(".")}
        return meta, sum(1 for k in meta if k.rsplit("/", 1)[-1] == ".zarray")


FORMAT = Zarr2()
