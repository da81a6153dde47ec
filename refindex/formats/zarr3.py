"""zarr format 3 as an output format: the object the pipeline and the readers ask about it.

The same surface as :mod:`.zarr2` (:class:`refindex.formats.ZarrFormat`); the v3 documents
themselves (``zarr.json`` per node, chunk keys ``c/i/j``) are :mod:`.v3`'s, loaded when a
document is made: what a reader asks (the consolidated key, attribute rewriting) loads no writer.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import os

    from ..model import ArrayNode, RefsDocument, Tree

ZARR_FORMAT = 3


class Zarr3:
    """zarr format 3 with the surface of :class:`refindex.formats.zarr2.Zarr2`: its conventions, zarr's
    verdict on an array, its documents (:mod:`.v3`), its writers."""

    number = ZARR_FORMAT
    label = "zarr v3"
    consolidated_key: str | None = None  # stated in the root zarr.json; zarr finds it
    combinable = False  # batch's combine merges zarr v2 indexes only
    summary_fields: dict[str, Any] = {"zarr_format": ZARR_FORMAT}

    def apply_convention(self, tree: Tree, convention: Any) -> tuple[str, list[tuple[str, str]]]:
        """``tree`` rewritten for ``convention``'s v3 form: (the convention applied, ``(path, reason)`` of
        every array with no form in it: the caller's policy decides)."""
        from .. import conventions

        return conventions.apply_v3(tree, convention)

    def codec_names(self, tree: Tree) -> list[str]:
        """The v3 codec names the arrays of ``tree`` use (the provenance's ``codecs`` list)."""
        from .v3 import codecs_of

        return codecs_of(tree)

    def refusal(self, node: ArrayNode, *, portable: bool) -> str | None:
        """Why an index of this format cannot hold ``node`` (None: it can)."""
        from ..codecs import codec_names, codec_provider_v3, zarr_refusal_v3
        from .v3 import NoV3Form, array_document

        try:
            doc = array_document(node, portable=portable)
        except NoV3Form as e:
            return f"no zarr v3 form: {e}"
        why = zarr_refusal_v3(doc)
        if why is not None:
            return f"zarr cannot open the array this dataset would become ({why})"
        own = [c for c in codec_names([doc]) if codec_provider_v3(c) == "refindex"]
        if portable and own:
            return f"a portable index may not name refindex's own codec {own[0]}"
        return None

    def stock_codec(self, codec_id: str) -> bool:
        """Does a reader of this format decode the v2 codec ``codec_id`` with numcodecs/imagecodecs alone?"""
        from ..codecs import stock_in_v3

        return stock_in_v3(codec_id)

    def head_refs(self, tree: Tree) -> RefsDocument:
        """The index without its chunk entries (what the safety gate reads)."""
        from .v3 import head_refs

        return head_refs(tree)

    def to_refs(self, tree: Tree) -> RefsDocument:
        from .v3 import to_refs

        return to_refs(tree)

    def write_json(self, tree: Tree, path: str | os.PathLike, *, head: RefsDocument) -> dict[str, Any]:
        """The JSON index streamed from the chunk tables; its summary."""
        from .v3 import write_json

        return write_json(tree, path, head=head)

    def write_parquet(self, tree: Tree, path: str | os.PathLike, *, record_size: int) -> dict[str, Any]:
        from .v3 import write_parquet

        return write_parquet(tree, path, record_size=record_size)

    def with_attributes(self, refs: RefsDocument, change: Callable[[dict[str, Any]], dict[str, Any]]) -> RefsDocument:
        """A copy of ``refs`` with every ``zarr.json``'s attributes ``change``'d, the root's consolidated
        metadata rebuilt from them."""
        new: dict[str, Any] = {}
        docs: dict[str, Any] = {}
        for key, value in refs["refs"].items():
            if key.rsplit("/", 1)[-1] == "zarr.json" and isinstance(value, str):
                doc = json.loads(value)
                doc.pop("consolidated_metadata", None)
                doc["attributes"] = change(doc.get("attributes") or {})
                docs[key[: -len("zarr.json")].rstrip("/")] = doc
                value = json.dumps(doc, allow_nan=True)
            new[key] = value
        if "" in docs:
            root = dict(docs[""], consolidated_metadata={"kind": "inline", "must_understand": False,
                                                         "metadata": {k: d for k, d in docs.items() if k}})
            new["zarr.json"] = json.dumps(root, allow_nan=True)
        return {**refs, "refs": new}

    def documents_in(self, refs: dict[str, Any]) -> tuple[set[str], int]:
        """(the metadata keys, the number of arrays) of an index's ``refs``."""
        meta = {k for k in refs if k.rsplit("/", 1)[-1] == "zarr.json"}
        return meta, sum(1 for k in meta if k != "zarr.json" and '"node_type": "array"' in refs[k])


FORMAT = Zarr3()
