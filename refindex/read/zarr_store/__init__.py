"""An index served to zarr: refindex's read-only store over an index (``_store``, with the
read-ahead of sequential scans, ``_scan_ahead``), consolidated metadata (``_consolidated``) and
``open``/``store`` (``_open``: an index, or an HDF5 file indexed on the fly, as a zarr group).
Names load on first use (zarr loads with them).
"""

from ...lazy import attribute_loader

_WHERE = {
    "FetchStats": "_store", "IndexStore": "_store", "fsspec_range_reader": "_store",
    "ScanAhead": "_scan_ahead",
    "METADATA_NAMES": "_consolidated", "consolidation_differences": "_consolidated", "open_group": "_consolidated",
    "ReadOptions": "_open", "check_index": "_open", "index_store": "_open", "open": "_open",
    "reference_fs": "_open", "store": "_open", "store_of": "_open",
}

__all__ = sorted(_WHERE)

__getattr__ = attribute_loader(__name__, _WHERE)
