"""Writers: a scanned, conventioned :class:`~refindex.model.Tree` -> an index.

The documents of an index (``_refs``: zarr v2 metadata, URL templates, provenance, chunk
entries) are written as one JSON file (``_json``: whole or streamed from the chunk
tables) or as fsspec's parquet reference layout (``_parquet``); every write appears whole
or not at all (``_atomic``).  A new output format is a module beside these, as zarr
format 3 is (:mod:`refindex.writers.v3`: ``zarr.json`` per node, chunk keys ``c/i/j``,
written as JSON or parquet by the same machinery).
"""

from ._atomic import atomic_file, atomic_folder, atomic_write_bytes, check_writable, output_error, remove_leftovers
from ._json import STREAM_BLOCK, dumps, format_rows, write_json, write_json_stream
from ._parquet import DEFAULT_RECORD_SIZE, ZMETADATA, array_records, metadata_document, write_parquet
from ._refs import (FORMAT_VERSION, chunk_refs, consolidated, head_refs, metadata_items, metadata_json, prefix_of,
                    to_refs, url_templates, zarray)
from . import icechunk, v3

__all__ = ["DEFAULT_RECORD_SIZE", "FORMAT_VERSION", "STREAM_BLOCK", "ZMETADATA", "array_records", "atomic_file",
           "atomic_folder", "atomic_write_bytes", "check_writable", "chunk_refs", "consolidated", "dumps", "format_rows", "head_refs",
           "metadata_document", "metadata_items", "metadata_json", "output_error", "prefix_of", "remove_leftovers", "to_refs",
           "url_templates", "icechunk", "v3", "write_json", "write_json_stream", "write_parquet", "zarray"]
