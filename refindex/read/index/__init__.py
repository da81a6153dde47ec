"""The index side of reading: getting an index that can be trusted and is fresh.

What a target is by its name and where an index made on the fly is kept (``_names``), loading
an index or making one on the fly through the index cache (``_load``), an index kept in an
Icechunk repository (``_icechunk``, ``_repository``), and which URLs an index may make its
reader fetch (``_urlpolicy``, ``_urlcheck``, ``_hosts``).  The freshness check against the
source is :mod:`refindex.read.freshness` (its own public package).  The consumers of an index
(:mod:`..zarr_store`, :mod:`..nwb`, :mod:`..h5py_road`, :mod:`..inspect`) import from here;
nothing here imports them.  Names load on first use: ``_names`` is imported before h5py or zarr.
"""

from ...lazy import attribute_loader

_WHERE = {
    "CacheSetting": "_names", "IndexCache": "_names", "cache_entry": "_names", "cache_folder": "_names", "kind_by_name": "_names",
    "index_of_file": "_load", "keep_in_cache": "_load", "kind_of": "_load", "load_index": "_load",
    "load_refs": "_load", "parquet_metadata": "_load", "zarr_format_of": "_load",
    "IcechunkIndex": "_icechunk", "icechunk_index": "_icechunk", "is_repository": "_icechunk",
    "named_otherwise": "_repository", "names_repository": "_repository",
    "UrlPolicy": "_urlpolicy", "allowed_patterns": "_urlpolicy",
    "check_declared": "_urlcheck", "check_refs": "_urlcheck", "declared_sources": "_urlcheck",
    "expand_url": "_urlcheck", "untrusted": "_urlcheck",
}

__all__ = sorted(_WHERE)

__getattr__ = attribute_loader(__name__, _WHERE)
