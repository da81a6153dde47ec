"""zarr format 2 as an output format: the one object the pipeline and the readers ask about it.

Its documents (``.zgroup``/``.zattrs``/``.zarray`` and ``.zmetadata``) are written by
:mod:`._refs`, the layout the JSON (:mod:`._json`) and parquet (:mod:`._parquet`) writers
take by default; :mod:`.zarr3` has the same surface for format 3, so a caller holds the
chosen format (:func:`refindex.formats.zarr`) and never tests a number.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

from .. import conventions
from ..codecs import codec_ids, stock, zarr_refusal
from ..model import ArrayNode, RefsDocument, Tree
from ._json import write_json_stream
from ._parquet import write_parquet
from ._refs import head_refs, to_refs, zarray

ZARR_FORMAT = 2
CONSOLIDATED = ".zmetadata"
Attributes = dict[str, Any]


class Zarr2:
    """zarr format 2: the convention that fits it, zarr's verdict on an array, the documents, the writers."""

    number = ZARR_FORMAT
    label = "zarr v2"
    consolidated_key: str | None = CONSOLIDATED  # where the index's consolidated metadata is (xarray asks)
    combinable = True  # batch's combine merges indexes of this format

    def apply_convention(self, tree: Tree, convention: Any) -> tuple[str, list[tuple[str, str]]]:
        """``tree`` rewritten for ``convention``: (the convention applied, the arrays with no form: none)."""
        return conventions.apply(tree, convention), []

    def codec_names(self, tree: Tree) -> list[str]:
        """The codec ids the arrays of ``tree`` use (the provenance's ``codecs`` list)."""
        return codec_ids(zarray(a) for a in tree.arrays.values())

    def refusal(self, node: ArrayNode, *, portable: bool) -> str | None:
        """Why an index of this format cannot hold ``node`` (None: it can)."""
        why = zarr_refusal(zarray(node))
        return None if why is None else f"zarr cannot open the array this dataset would become ({why})"

    def stock_codec(self, codec_id: str) -> bool:
        """Does a reader of this format decode the v2 codec ``codec_id`` with numcodecs/imagecodecs alone?"""
        return stock(codec_id)

    def head_refs(self, tree: Tree) -> RefsDocument:
        """The index without its chunk entries (what the safety gate reads)."""
        return head_refs(tree)

    def to_refs(self, tree: Tree) -> RefsDocument:
        return to_refs(tree)

    def write_json(self, tree: Tree, path: str | os.PathLike, *, head: RefsDocument) -> dict[str, Any]:
        """The JSON index streamed from the chunk tables; its summary."""
        return write_json_stream(tree, path, head=head)

    def write_parquet(self, tree: Tree, path: str | os.PathLike, *, record_size: int) -> dict[str, Any]:
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


FORMAT = Zarr2()
