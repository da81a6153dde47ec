"""Version 1 B-trees of raw data chunks (node type 1): the index of every file written without
``libver="latest"`` (every NWB file h5py and hdmf write).

A node is ``TREE``, type, level, entries used, two sibling addresses, then keys and children
interleaved; a key is the chunk's stored size (4 bytes), filter mask (4) and its offset in
each dimension plus the element dimension (8 each); a child is a node (level > 0) or a chunk.
Nodes are allocated for 2K entries, so every node of a tree has the same size: a level is
read as one ``(nodes, node size)`` matrix and decoded column-wise.  No checksums: every
field libhdf5 relies on is checked (signature, type, level, entries, addresses, key order).
"""

from __future__ import annotations

import numpy as np

from ._base import DatasetFacts, Listing, Reader, batches
from ._layout import Layout

MAX_LEVELS = 32


def node_dtype(rank: int, sa: int, two_k: int) -> np.dtype:
    """A node as a numpy record: its fields are views into the fetched bytes, not copies."""
    addr = f"<u{sa}"
    key = [("size", "<u4"), ("mask", "<u4"), ("offset", "<u8", (rank + 1,))]
    entry = np.dtype(key + [("child", addr)])
    return np.dtype([("sig", "S4"), ("type", "u1"), ("level", "u1"), ("used", "<u2"), ("left", addr),
                     ("right", addr), ("entries", entry, (two_k,)), ("last", np.dtype(key))])


def read_btree1(reader: Reader, ds: DatasetFacts, layout: Layout, progress=None) -> Listing:
    facts = reader.facts
    rank = len(ds.chunks)
    two_k = 2 * facts.istore_k
    dtype = node_dtype(rank, facts.sizeof_addr, two_k)
    nodes = np.asarray([layout.address], np.uint64)
    level = None
    while True:
        parts, children = [], []
        for part in batches(len(nodes), dtype.itemsize):
            rows = reader.rows(nodes[part], dtype.itemsize, "B-tree node").reshape(-1).view(dtype)
            level = _check_nodes(reader, rows, level, two_k, root=len(nodes) == 1 and level is None)
            used = np.arange(two_k) < rows["used"].astype(np.int64)[:, None]
            if level:
                children.append(rows["entries"]["child"][used].astype(np.uint64))
            else:
                parts.append(_chunks(reader, rows["entries"][used], ds))
                if progress is not None:
                    progress(len(parts[-1]))
        if not level:
            out = Listing.concat(parts, rank)
            _check_order(reader, out.coords)
            return out
        nodes = np.concatenate(children)
        _check_children(reader, nodes)
        level -= 1


def _check_nodes(reader: Reader, rows: np.ndarray, level: int | None, two_k: int, root: bool) -> int:
    """The level of this set of nodes (all the same), after checking what libhdf5 checks and more."""
    if (rows["sig"] != b"TREE").any() or (rows["type"] != 1).any():
        raise reader.fail("a node that is not a chunk B-tree node")
    levels = rows["level"].astype(np.int64)
    got = int(levels[0])
    if (levels != got).any() or (level is not None and got != level) or got > MAX_LEVELS:
        raise reader.fail("a node at another level than its parent's children")
    used = rows["used"]
    if (used > two_k).any() or ((used == 0).any() and not (root and got == 0)):
        raise reader.fail("a node with more entries than the tree's 2K, or none")
    return got


def _chunks(reader: Reader, entries: np.ndarray, ds: DatasetFacts) -> Listing:
    """The chunks of a batch of leaves' used entries, in key order."""
    rank = len(ds.chunks)
    offsets = entries["offset"]
    if (offsets[:, rank] != 0).any():
        raise reader.fail("a chunk key with an element offset")
    coords = grid_positions(reader, offsets[:, :rank], ds.chunks)
    addrs = entries["child"].astype(np.uint64)
    if not reader.defined(addrs).all():
        raise reader.fail("a chunk at the undefined address")
    return Listing(coords, addrs + np.uint64(reader.facts.base), entries["size"].astype(np.uint64),
                   entries["mask"].astype(np.uint32))


def grid_positions(reader: Reader, offsets: np.ndarray, chunks: tuple[int, ...]) -> np.ndarray:
    """Element offsets of chunks -> chunk-grid positions; every offset must lie on the grid.

    Below 2^53 the division runs in float64 (exact there, and vectorised, unlike integer division).
    """
    size = np.asarray(chunks, np.float64)
    if len(offsets) and int(offsets.max()) >= 1 << 53:
        raise reader.fail("a chunk key beyond any dataset's extent")
    coords = (offsets.astype(np.float64) / size).astype(np.int64)
    if (coords * np.asarray(chunks, np.int64) != offsets.astype(np.int64)).any():
        raise reader.fail("a chunk key whose offset is not on the chunk grid")
    return coords


def _check_children(reader: Reader, nodes: np.ndarray) -> None:
    if not reader.defined(nodes).all():
        raise reader.fail("a child node at the undefined address")
    if len(np.unique(nodes)) != len(nodes):
        raise reader.fail("a node listed twice")


def _check_order(reader: Reader, coords: np.ndarray) -> None:
    """Leaves list their chunks in increasing C order, each once (libhdf5 inserts them so)."""
    if len(coords) < 2:
        return
    span = coords.max(axis=0).astype(np.float64) + 1
    if float(np.prod(span)) >= 2.0 ** 62:
        order = np.lexsort(coords.T[::-1])
        if (order != np.arange(len(coords))).any() or (coords[1:] == coords[:-1]).all(axis=1).any():
            raise reader.fail("chunk keys out of order")
        return
    linear = np.ravel_multi_index(tuple(coords.T), tuple(int(s) for s in span))
    if not bool((linear[1:] > linear[:-1]).all()):
        raise reader.fail("chunk keys out of order")
