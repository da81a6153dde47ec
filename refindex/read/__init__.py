"""The read side: what users and services do with an index.

``open`` (an index, or an HDF5 file indexed on the fly, as a zarr group), ``open_nwb``
(an NWBFile through hdmf-zarr or, ``reader="h5py"``, pynwb over the h5py road),
``h5py_file`` (a real ``h5py.File`` whose metadata comes from the index: :mod:`.h5py_road`), ``verify`` (every dataset against h5py), ``info`` (a
summary), ``object_model``/``check`` (the hierarchy as a Zarr Object Model, and templates),
the store that serves an index from memory (:class:`IndexStore`), the freshness check of an
index against its source (:mod:`refindex.read.freshness`), the rules for which URLs an index may make its reader fetch
(:class:`UrlPolicy`), and the local cache of indexes made on the fly.

The cache lives in ``$REFINDEX_CACHE_DIR``, else ``$XDG_CACHE_HOME/refindex``, else
``~/.cache/refindex``; ``REFINDEX_CACHE_DIR=off`` or ``cache=False`` turns it off.
Entries are whole JSON indexes written atomically; deleting the folder is always safe.
"""

from ..lazy import attribute_loader

# Loaded on first use: the h5py road (``h5py_file``) needs neither zarr nor hdmf-zarr.
_WHERE = {
    "METADATA_NAMES": "_consolidated", "consolidation_differences": "_consolidated", "open_group": "_consolidated",
    "IcechunkIndex": "_icechunk", "icechunk_index": "_icechunk", "is_repository": "_icechunk",
    "info": "_info",
    "cache_folder": "_names", "index_of_file": "_load", "kind_of": "_load", "load_index": "_load",
    "load_refs": "_load", "parquet_metadata": "_load", "zarr_format_of": "_load",
    "ExternalIndexes": "nwb", "ZarrTree": "nwb", "nwb_io_class": "nwb", "nwb_io_class_v3": "nwb",
    "open_nwb": "nwb", "serve_from_memory": "nwb",
    "ReadOptions": "_open", "check_index": "_open", "index_store": "_open", "open": "_open",
    "reference_fs": "_open", "store": "_open", "store_of": "_open",
    "Freshness": "freshness", "check_fresh": "freshness", "check_source": "freshness",
    "notes": "_notes",
    "CheckReport": "_schema", "check": "_schema", "load_metadata": "_schema", "load_template": "_schema",
    "object_model": "_schema", "zom_json": "_schema:dumps",
    "FetchStats": "_store", "IndexStore": "_store", "fsspec_range_reader": "_store",
    "UrlPolicy": "_urlpolicy",
    "VerifyReport": "_verify", "verify": "_verify",
    "h5py_file": "h5py_road",
}

__all__ = sorted(_WHERE)

__getattr__ = attribute_loader(__name__, _WHERE)
