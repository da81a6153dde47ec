"""Reading NWB files: ``open_nwb`` and its roads (:mod:`._roads`), hdmf-zarr's IO classes over an index
(:mod:`._io`), the zarr tree made from memory (:mod:`._tree`), the indexes of linked files
(:mod:`._external`) and the read-ahead of the first recording chunk (:mod:`._readahead`)."""

from ._external import ExternalIndexes
from ._io import nwb_io_class, nwb_io_class_v3
from ._readahead import first_acquisition_chunks, stored_zlib
from ._roads import DEFAULT_READER, READERS, Reader, open_nwb, require_nwb, require_nwb_file
from ._tree import ZarrTree, decode_chunk, serve_from_memory

__all__ = ["DEFAULT_READER", "READERS", "ExternalIndexes", "Reader", "ZarrTree", "decode_chunk",
           "first_acquisition_chunks", "nwb_io_class", "nwb_io_class_v3", "open_nwb", "require_nwb",
           "require_nwb_file", "serve_from_memory", "stored_zlib"]
