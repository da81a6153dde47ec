"""The h5py road: a real, read-only ``h5py.File`` over an index, for h5py users (pynwb's
``NWBHDF5IO``, nwbinspector, dandi-cli, plain h5py scripts).

An index carries the HDF5 metadata its scan read (its *pages*, see
:mod:`refindex.scanner`), so libhdf5 opens a remote file from the index alone: one request
for the index, one freshness check, then local speed.  Other bytes (data) come by range
requests through :mod:`refindex.source`, the chunks libhdf5 will ask for next fetched
ahead, concurrently (``_file``), found from the index's chunk tables (``_chunks``).
"""

from ._chunks import ChunkMap, ChunkRun, json_loader, parquet_loader
from ._file import IndexedFile, ReadAhead, RoadStats
from ._open import Prepared, Road, h5py_file, open_road, prepared
from ._served import PageMap

__all__ = ["ChunkMap", "ChunkRun", "IndexedFile", "PageMap", "Prepared", "ReadAhead", "Road", "RoadStats", "h5py_file",
           "json_loader", "open_road", "parquet_loader", "prepared"]
