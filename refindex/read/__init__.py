"""The read side: what users and services do with an index.

``open`` (an index, or an HDF5 file indexed on the fly, as a zarr group), ``open_nwb``
(an NWBFile through hdmf-zarr or, ``reader="h5py"``, pynwb over the h5py road),
``h5py_file`` (a real ``h5py.File`` whose metadata comes from the index: :mod:`.h5py_road`), ``verify`` (every dataset against h5py), ``info`` (a
summary), ``object_model``/``check`` (the hierarchy as a Zarr Object Model, and templates),
the store that serves an index from memory (:class:`IndexStore`), the freshness check of an
index against its source (:mod:`refindex.read.freshness`), the rules for which URLs an index may make its reader fetch
(:class:`UrlPolicy`), and the local cache of indexes made on the fly.

Two halves: the index side (:mod:`.index`, with :mod:`.freshness`: an index that can be trusted
and is fresh) and its consumers (:mod:`.zarr_store`, :mod:`.nwb`, :mod:`.h5py_road`,
:mod:`.inspect`), which import the index side and never the other way round.

The index cache lives in ``$REFINDEX_CACHE_DIR``, else ``$XDG_CACHE_HOME/refindex``, else
``~/.cache/refindex``; ``REFINDEX_CACHE_DIR=off`` or ``cache=False`` turns it off.
Entries are whole JSON indexes written atomically; deleting the folder is always safe.
"""

from ..lazy import attribute_loader

# Loaded on first use: the h5py road (``h5py_file``) needs neither zarr nor hdmf-zarr.
_WHERE = {
    "METADATA_NAMES": "zarr_store", "consolidation_differences": "zarr_store", "open_group": "zarr_store",
    "IcechunkIndex": "index", "icechunk_index": "index", "is_repository": "index",
    "info": "inspect",
    "cache_folder": "index", "index_of_file": "index", "kind_of": "index", "load_index": "index",
    "load_refs": "index", "parquet_metadata": "index", "zarr_format_of": "index",
    "ExternalIndexes": "nwb", "ZarrTree": "nwb", "nwb_io_class": "nwb", "nwb_io_class_v3": "nwb",
    "open_nwb": "nwb", "serve_from_memory": "nwb",
    "ReadOptions": "zarr_store", "check_index": "zarr_store", "index_store": "zarr_store", "open": "zarr_store",
    "reference_fs": "zarr_store", "store": "zarr_store", "store_of": "zarr_store",
    "Freshness": "freshness", "check_fresh": "freshness", "check_source": "freshness",
    "notes": "inspect",
    "CheckReport": "inspect", "check": "inspect", "load_metadata": "inspect", "load_template": "inspect",
    "object_model": "inspect", "zom_json": "inspect:dumps",
    "FetchStats": "zarr_store", "IndexStore": "zarr_store", "fsspec_range_reader": "zarr_store",
    "UrlPolicy": "index",
    "VerifyReport": "inspect", "verify": "inspect",
    "h5py_file": "h5py_road",
}

__all__ = sorted(_WHERE)

__getattr__ = attribute_loader(__name__, _WHERE)
