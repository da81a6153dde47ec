"""Writers: a scanned, conventioned :class:`~refindex.model.Tree` -> an index.

The documents of an index (``_refs``: zarr v2 metadata, URL templates, provenance, chunk
entries) are written as one JSON file (``_json``: whole or streamed from the chunk
tables) or as fsspec's parquet reference layout (``_parquet``); every write appears whole
or not at all (``_atomic``).  A new output format is a module beside these, as zarr
format 3 is (:mod:`refindex.formats.zarr3`: ``zarr.json`` per node, chunk keys ``c/i/j``,
written as JSON or parquet by the same machinery).
"""

from ..lazy import attribute_loader

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
    "icechunk": "icechunk:", "zarr3": "zarr3:",
}

__all__ = sorted(_WHERE)

__getattr__ = attribute_loader(__name__, _WHERE)
