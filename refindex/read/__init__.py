"""The read side: what users and services do with an index.

``open`` (an index, or an HDF5 file indexed on the fly, as a zarr group), ``open_nwb``
(an NWBFile through hdmf-zarr), ``verify`` (every dataset against h5py), ``info`` (a
summary), ``object_model``/``check`` (the hierarchy as a Zarr Object Model, and templates),
the store that serves an index from memory (:class:`IndexStore`), the freshness check of an
index against its source (:mod:`refindex.read.freshness`), the rules for which URLs an index may make its reader fetch
(:class:`UrlPolicy`), and the local cache of indexes made on the fly.

The cache lives in ``$REFINDEX_CACHE_DIR``, else ``$XDG_CACHE_HOME/refindex``, else
``~/.cache/refindex``; ``REFINDEX_CACHE_DIR=off`` or ``cache=False`` turns it off.
Entries are whole JSON indexes written atomically; deleting the folder is always safe.
"""

from ._consolidated import METADATA_NAMES, consolidation_differences, open_group
from ._icechunk import IcechunkIndex, icechunk_index, is_repository
from ._info import info
from ._load import cache_folder, index_of_file, kind_of, load_index, load_refs, parquet_metadata, zarr_format_of
from ._nwb import ExternalIndexes, ZarrTree, nwb_io_class, nwb_io_class_v3, open_nwb, serve_from_memory
from ._open import ReadOptions, check_index, index_store, open, reference_fs, store, store_of
from .freshness import Freshness, check_fresh, check_source
from ._notes import notes
from ._schema import CheckReport, check, load_metadata, load_template, object_model
from ._schema import dumps as zom_json
from ._store import FetchStats, IndexStore, fsspec_range_reader
from ._urlpolicy import UrlPolicy
from ._verify import VerifyReport, verify

__all__ = ["METADATA_NAMES", "CheckReport", "ExternalIndexes", "FetchStats", "Freshness", "IcechunkIndex", "IndexStore", "ReadOptions", "UrlPolicy",
           "VerifyReport", "ZarrTree", "cache_folder", "check", "check_index", "fsspec_range_reader", "check_fresh", "check_source", "icechunk_index", "is_repository", "consolidation_differences", "index_of_file", "index_store",
           "info", "kind_of", "load_index", "load_metadata", "load_refs", "load_template", "notes", "zom_json", "nwb_io_class", "nwb_io_class_v3", "object_model", "open",
           "open_group", "open_nwb", "parquet_metadata", "zarr_format_of", "serve_from_memory", "reference_fs", "store", "store_of", "verify"]
