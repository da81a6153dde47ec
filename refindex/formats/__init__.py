"""Output formats: a scanned :class:`~refindex.model.Tree` -> an index, one module per format.

The zarr format is chosen once, here (:func:`for_zarr`): :mod:`.zarr2` and :mod:`.zarr3` each hold
one object with the same small surface (:class:`ZarrFormat`: its conventions, zarr's verdict on
an array, its documents, its JSON and parquet writers), and the pipeline, the conventions'
and codecs' callers and the readers ask that object instead of testing ``zarr_format``.

The documents of an index (``_refs``: zarr v2 metadata, URL templates, provenance, chunk
entries) are written as one JSON file (``_json``: whole or streamed from the chunk
tables) or as fsspec's parquet reference layout (``_parquet``); every write appears whole
or not at all (``_atomic``).  A new output format is a module beside these, as zarr
format 3 is (:mod:`refindex.formats.v3`: ``zarr.json`` per node, chunk keys ``c/i/j``,
written as JSON or parquet by the same machinery).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..lazy import attribute_loader

if TYPE_CHECKING:
    import os

    from ..model import ArrayNode, RefsDocument, Tree

# Loaded on first use: a reader of an index's pages needs none of the writers.
_WHERE = {
    "atomic_file": "_atomic", "atomic_folder": "_atomic", "atomic_write_bytes": "_atomic",
    "remove_leftovers": "_atomic", "check_writable": "_atomic", "output_error": "_atomic",
    "STREAM_BLOCK": "_json", "dumps": "_json", "format_rows": "_json", "write_json": "_json",
    "write_json_stream": "_json",
    "InlineBytes": "pages", "PAGES_FORMAT": "pages", "encoded_size": "pages", "pages_document": "pages",
    "pages_of_document": "pages",
    "DEFAULT_RECORD_SIZE": "_parquet", "ZMETADATA": "_parquet", "array_records": "_parquet",
    "metadata_document": "_parquet", "write_parquet": "_parquet", "write_record": "_parquet", "numbers": "_parquet",
    "blobs": "_parquet", "prepare_destination": "_parquet",
    "FORMAT_VERSION": "_refs", "chunk_refs": "_refs", "consolidated": "_refs", "head_refs": "_refs",
    "metadata_items": "_refs", "metadata_json": "_refs", "prefix_of": "_refs", "to_refs": "_refs",
    "url_templates": "_refs", "zarray": "_refs",
    "icechunk": "icechunk:", "v3": "v3:", "zarr2": "zarr2:", "zarr3": "zarr3:",
}

__all__ = sorted([*_WHERE, "ZarrFormat", "for_zarr", "of_refs"])
_ZARR = {2: "zarr2", 3: "zarr3"}


class ZarrFormat(Protocol):
    """What every zarr format module's ``FORMAT`` answers."""

    number: int  # what ``zarr_format`` says
    label: str  # "zarr v2": how messages name it
    consolidated_key: str | None  # the key of the consolidated metadata (None: in the root document)
    combinable: bool  # batch's combine merges indexes of this format
    summary_fields: dict[str, Any]  # what a write's summary adds for this format

    def apply_convention(self, tree: Tree, convention: Any) -> tuple[str, list[tuple[str, str]]]: ...
    def codec_names(self, tree: Tree) -> list[str]: ...
    def refusal(self, node: ArrayNode, *, portable: bool) -> str | None: ...
    def stock_codec(self, codec_id: str) -> bool: ...
    def head_refs(self, tree: Tree) -> RefsDocument: ...
    def to_refs(self, tree: Tree) -> RefsDocument: ...
    def write_json(self, tree: Tree, path: str | os.PathLike, *, head: RefsDocument) -> dict[str, Any]: ...
    def write_parquet(self, tree: Tree, path: str | os.PathLike, *, record_size: int) -> dict[str, Any]: ...
    def with_attributes(self, refs: RefsDocument,
                        change: Callable[[dict[str, Any]], dict[str, Any]]) -> RefsDocument: ...
    def documents_in(self, refs: dict[str, Any]) -> tuple[set[str], int]: ...


def for_zarr(number: int) -> ZarrFormat:
    """The format object of zarr format ``number`` (2 or 3): the one place a zarr format is chosen."""
    if number not in _ZARR:
        raise ValueError(f"zarr_format must be 2 or 3, not {number!r}")
    return import_module(f"{__name__}.{_ZARR[number]}").FORMAT

__getattr__ = attribute_loader(__name__, _WHERE)


def of_refs(refs: dict[str, Any]) -> ZarrFormat:
    """The format of a loaded index (an RFS dict, or a parquet index's metadata): a root ``zarr.json``,
    or the format its provenance records (none: zarr v2)."""
    body = refs.get("refs") if "version" in refs else refs
    if isinstance(body, dict) and "zarr.json" in body:
        return for_zarr(3)
    prov = refs.get("refindex")
    recorded = prov.get("zarr_format") if isinstance(prov, dict) else None
    return for_zarr(recorded if recorded in _ZARR else 2)
