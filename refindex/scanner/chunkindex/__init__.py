"""Native readers of libhdf5's chunk indexes: a dataset's stored chunks as numpy columns.

libhdf5's ``chunk_iter`` visits chunks one callback at a time and reads index nodes one
after another (one round trip each on a remote file).  These readers fetch the nodes of one
tree level together through the source layer (merged ranges, concurrent requests, retries)
and decode them column-wise: version 1 B-trees (``_btree1``), version 2 B-trees
(``_btree2``), fixed arrays (``_farray``), extensible arrays (``_earray``), single-chunk and
implicit indexes (``_direct``).  The Data Layout message says which (``_layout``).

They never guess: whatever they do not read exactly as libhdf5 writes it raises
:class:`Unparsed`, and the scanner asks ``chunk_iter`` instead (recording why).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from ._base import DatasetFacts, Fetch, FileFacts, Listing, Reader, Unparsed, chunk_size_width
from ._btree1 import read_btree1
from ._btree2 import read_btree2
from ._direct import read_implicit, read_single
from ._earray import read_earray
from ._farray import read_farray
from ._layout import Layout, dataset_layout, file_facts
from ._stats import IndexStats

READERS: dict[str, Callable[..., Listing]] = {
    "btree1": read_btree1, "btree2": read_btree2, "farray": read_farray, "earray": read_earray,
    "single": read_single, "implicit": read_implicit,
}


def read_chunk_index(fetch: Fetch, facts: FileFacts, ds: DatasetFacts,
                     progress: Callable[[int], None] | None = None) -> tuple[Listing, Layout, Reader]:
    """The stored chunks of ``ds`` read from its index; (listing, layout, reader with its read counts).

    Raises :class:`Unparsed` (with the index type and why) for anything not read natively.
    """
    layout = dataset_layout(fetch, facts, ds)
    if ds.itemsize is None:  # variable-length types: h5py reports their size in memory, the layout the stored one
        ds = replace(ds, itemsize=layout.dims[-1])
    reader = Reader(fetch, facts, layout.index)
    reader.size_width = facts.sizeof_size if layout.version >= 5 else chunk_size_width(ds.chunk_bytes)
    if not reader.defined(np.asarray([layout.address]))[0]:  # no chunk written yet, whatever the index
        return Listing.empty(len(ds.chunks)), layout, reader
    try:
        listing = READERS[layout.index](reader, ds, layout, progress)
    except Unparsed as e:
        e.index = layout.index
        raise
    return listing, layout, reader


__all__ = ["DatasetFacts", "Fetch", "FileFacts", "IndexStats", "Layout", "Listing", "READERS", "Reader", "Unparsed",
           "dataset_layout", "file_facts", "read_chunk_index"]
