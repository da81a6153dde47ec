"""Where a file's chunks lie, without the rest of a scan: what the h5py road reads ahead by.

The h5py road opened on the fly with no index to keep (``h5py_file(url, cache=False)``)
needs of a scan only the chunk tables: libhdf5 reads the file's own bytes (those the
prefetch brought, the rest by range requests), and the tables let the road fetch the chunks
libhdf5 will ask for next.  The rest of a scan (every attribute, small values copied in,
conventions, the index's JSON) would be made to be thrown away: on P4's 122 MB file it was
~150 ms of the open's ~360 ms; these tables take ~15 ms.  A table only steers reads ahead:
the bytes libhdf5 is served are always the file's bytes at the offsets it asked for.
"""

from __future__ import annotations

import h5py
import numpy as np

from ..errors import RefindexError
from ._chunkiter import chunk_table
from ._listing import dataset_facts
from .chunkindex import Fetch, FileFacts, Unparsed, file_facts, read_chunk_index

Runs = dict[str, tuple[np.ndarray, np.ndarray]]  # path -> (offsets, sizes) in C order of the chunk grid


def chunk_runs(h5: h5py.File, fetch: Fetch, file_size: int) -> Runs:
    """Every chunked dataset's stored chunks (path -> int64 offsets, sizes), in C order of its chunk grid,
    the order libhdf5 reads a selection in.  Native index readers (a tree level per round trip through
    ``fetch``), else libhdf5's ``chunk_iter``; a dataset neither lists is left out (no read-ahead)."""
    from h5py import h5d, h5o

    names: list[bytes] = []
    h5o.visit(h5.id, lambda name, info: names.append(name) if info.type == h5o.TYPE_DATASET else None, info=True)
    facts = _facts(h5, fetch, file_size)
    out: Runs = {}
    for name in names:
        try:
            d = h5py.Dataset(h5d.open(h5.id, name))
            dcpl = d.id.get_create_plist()
            chunked = dcpl.get_layout() == h5d.CHUNKED
        except RefindexError:  # the source's own errors (a read that failed): the open's
            raise
        except Exception:  # noqa: BLE001 - libhdf5 cannot open it: reading it through h5py will say why
            continue
        if not chunked:
            continue
        listed = _listed(d, dcpl, fetch, facts)
        if listed is not None and len(listed[1]):
            coords, offsets, sizes = listed
            order = np.lexsort(coords.T[::-1]) if coords.size else np.arange(len(offsets))
            out[d.name] = offsets[order].astype(np.int64), sizes[order].astype(np.int64)
    return out


def _facts(h5: h5py.File, fetch: Fetch, file_size: int) -> FileFacts | None:
    fcpl = h5.id.get_create_plist()
    try:
        return file_facts(fetch, fcpl.get_sizes(), int(fcpl.get_userblock()), file_size)
    except Unparsed:
        return None


def _listed(d: h5py.Dataset, dcpl, fetch: Fetch, facts: FileFacts | None) -> tuple[np.ndarray, ...] | None:
    """(coords, offsets, sizes) of ``d``'s chunks, or None when neither reader lists them."""
    if facts is not None:
        try:
            listing = read_chunk_index(fetch, facts, dataset_facts(d, dcpl))[0]
            return listing.coords, listing.offsets, listing.sizes
        except RefindexError:  # the source's own errors (a read that failed): the open's
            raise
        except Exception:  # noqa: BLE001 - Unparsed, or a native reader's failure: libhdf5 lists it
            pass
    try:
        table, _ = chunk_table(d, len(d.shape), tuple(int(c) for c in dcpl.get_chunk()))
    except RefindexError:
        raise
    except Exception:  # noqa: BLE001 - libhdf5 cannot list them: its read of the dataset will say why
        return None
    return table.coords, table.offsets, table.sizes
