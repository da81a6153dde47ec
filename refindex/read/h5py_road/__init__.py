"""The h5py road: a real, read-only ``h5py.File`` over an index, for h5py users (pynwb's
``NWBHDF5IO``, nwbinspector, dandi-cli, plain h5py scripts).

An index carries the HDF5 metadata its scan read (its *pages*, see
:mod:`refindex.scanner`), so libhdf5 opens a remote file from the index alone: one request
for the index, one freshness check, then local speed.  Other bytes (data) come by range
requests through :mod:`refindex.source`, the chunks libhdf5 will ask for next fetched
ahead, concurrently (``_file``), found from the index's chunk tables (``_chunks``): exactly
those of the h5py read in progress where its selection is seen (``_selection``).
"""

from ...lazy import attribute_loader

# Loaded on first use: ``h5py_file`` (``_start``) sends the index's request before the rest loads.
_WHERE = {
    "can_index_beside": "_beside", "index_beside": "_beside", "on_the_fly": "_beside", "whole_road": "_beside",
    "ChunkMap": "_chunks", "ChunkRun": "_chunks", "json_loader": "_chunks", "parquet_loader": "_chunks",
    "IndexedFile": "_file", "ReadAhead": "_file", "RoadStats": "_file",
    "Prepared": "_open", "Road": "_open", "open_road": "_open", "prepared": "_open",
    "PageMap": "_served",
    "fetch_early": "_start", "h5py_file": "_start", "requested_early": "_start", "scan_early": "_start",
    "SourceAsk": "_start",
    "uncached_remote_hdf5": "_start",
}

__all__ = sorted(_WHERE)

__getattr__ = attribute_loader(__name__, _WHERE)
