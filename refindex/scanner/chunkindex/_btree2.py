"""Version 2 B-trees of chunks (layout version 4, more than one unlimited dimension).

Header ``BTHD`` (node size, record size, depth, root address and record counts), internal
nodes ``BTIN`` (records, then per child its address, record count and, below depth 1, its
subtree's total), leaves ``BTLF`` (records).  Records are type 10 (address, chunk position)
or 11 (address, stored size, filter mask, chunk position); internal nodes hold records too.
Field widths follow from the node size as libhdf5 computes them; every node's checksum is
verified.  Records come out in key order (chunk positions in C order), as a walk visits them.
"""

from __future__ import annotations

import numpy as np

from ._base import DatasetFacts, Listing, Reader, batches, signature_ok, uint
from ._layout import Layout
from ._lookup3 import checksums_ok

PREFIX = 10  # signature, version, type, checksum
MAX_DEPTH = 16


def enc_size(n: int) -> int:
    """Bytes libhdf5 uses to store counts up to ``n``."""
    return (max(n, 1).bit_length() - 1) // 8 + 1


def node_info(node_size: int, rec: int, depth: int, sa: int) -> tuple[list[int], list[int], int]:
    """Per depth: most records in a node, bytes of its subtree-total field; bytes of a child's record count."""
    max_nrec = [(node_size - PREFIX) // rec]
    cum, cum_size = [max_nrec[0]], [0]
    count_size = enc_size(max_nrec[0])
    for d in range(1, depth + 1):
        ptr = sa + count_size + (cum_size[d - 1] if d > 1 else 0)
        max_nrec.append((node_size - (PREFIX + ptr)) // (rec + ptr))
        cum.append((max_nrec[d] + 1) * cum[d - 1] + max_nrec[d])
        cum_size.append(enc_size(cum[d]))
    return max_nrec, cum_size, count_size


def read_btree2(reader: Reader, ds: DatasetFacts, layout: Layout, progress=None) -> Listing:
    facts, rank = reader.facts, len(ds.chunks)
    sa, ss = facts.sizeof_addr, facts.sizeof_size
    kind = 11 if ds.filtered else 10
    h = reader.header(layout.address, 22 + sa + ss, "v2 B-tree header", b"BTHD", kind,
                      "a v2 B-tree header that is not this dataset's (signature, type or checksum)")
    rec = sa + 8 * rank + ((reader.size_width + 4) if ds.filtered else 0)
    node_size, rrec, depth = int(uint(h, 6, 4)[0]), int(uint(h, 10, 2)[0]), int(uint(h, 12, 2)[0])
    p = layout.params
    if (node_size, int(h[0, 14]), int(h[0, 15])) != (p.get("node_size"), p.get("split"), p.get("merge")) \
            or rrec != rec or depth > MAX_DEPTH or node_size < PREFIX + rec:
        raise reader.fail("v2 B-tree parameters that differ from the layout's or the record format")
    root, nrec, total = int(uint(h, 16, sa)[0]), int(uint(h, 16 + sa, 2)[0]), int(uint(h, 18 + sa, ss)[0])
    if not total or not reader.defined(np.asarray([root]))[0]:
        return Listing.empty(rank)
    max_nrec, cum_size, count_size = node_info(node_size, rec, depth, sa)
    nodes, counts = np.asarray([root], np.uint64), np.asarray([nrec], np.int64)
    records = []
    for d in range(depth, -1, -1):
        if (counts <= 0).any() or (counts > max_nrec[d]).any():
            raise reader.fail("a v2 B-tree node with no records or more than fit")
        ptr = sa + count_size + (cum_size[d - 1] if d > 1 else 0)
        kids, kid_counts = [], []
        for part in batches(len(nodes), node_size):
            rows = reader.rows(nodes[part], node_size, "v2 B-tree node")
            n = counts[part]
            end = 6 + n * rec + ((n + 1) * ptr if d else 0)
            if not signature_ok(rows, b"BTIN" if d else b"BTLF").all() or (rows[:, 4] != 0).any() \
                    or (rows[:, 5] != kind).any() or not checksums_ok(rows, end).all():
                raise reader.fail("a v2 B-tree node that is not this tree's (signature, type or checksum)")
            records.append(_records(rows, n, rec))
            if d:
                a, c = _children(rows, n, rec, ptr, sa, count_size)
                kids.append(a)
                kid_counts.append(c)
        if d:
            nodes, counts = np.concatenate(kids), np.concatenate(kid_counts)
            if not reader.defined(nodes).all() or len(np.unique(nodes)) != len(nodes):
                raise reader.fail("v2 B-tree children at the undefined address or listed twice")
    flat = np.concatenate(records)
    if len(flat) != total:
        raise reader.fail(f"a v2 B-tree of {len(flat)} records where its header counts {total}")
    out = _decode(reader, ds, flat)
    if progress is not None:
        progress(len(out))
    return out


def _records(rows: np.ndarray, counts: np.ndarray, rec: int) -> np.ndarray:
    """``(sum(counts), rec)`` records of a batch of nodes (each node's first ``counts[i]``)."""
    most = int(counts.max())
    body = rows[:, 6:6 + most * rec].reshape(len(rows), most, rec)
    return body[np.arange(most) < counts[:, None]]


def _children(rows: np.ndarray, counts: np.ndarray, rec: int, ptr: int, sa: int,
              count_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(addresses, record counts) of the children of a batch of internal nodes, in order."""
    most = int(counts.max()) + 1
    start = 6 + counts * rec  # each node's pointers follow its own records
    cols = start[:, None] + np.arange(most * ptr)[None, :]
    cols = np.minimum(cols, rows.shape[1] - 1)
    gathered = np.take_along_axis(rows, cols, axis=1).reshape(len(rows), most, ptr)
    flat = gathered[np.arange(most) < (counts + 1)[:, None]]
    return uint(flat, 0, sa), uint(flat, sa, count_size).astype(np.int64)


def _decode(reader: Reader, ds: DatasetFacts, flat: np.ndarray) -> Listing:
    sa, rank = reader.facts.sizeof_addr, len(ds.chunks)
    addrs = uint(flat, 0, sa)
    if ds.filtered:
        width = reader.size_width
        sizes, masks = uint(flat, sa, width), uint(flat, sa + width, 4).astype(np.uint32)
        at = sa + width + 4
    else:
        sizes, masks = np.full(len(flat), ds.chunk_bytes, np.uint64), np.zeros(len(flat), np.uint32)
        at = sa
    scaled = np.ascontiguousarray(flat[:, at:at + 8 * rank]).view("<u8").reshape(-1, rank)
    if len(scaled) and int(scaled.max()) >= 1 << 62:
        raise reader.fail("a chunk position beyond any dataset's extent")
    coords = scaled.astype(np.int64)
    if not reader.defined(addrs).all():
        raise reader.fail("a chunk record at the undefined address")
    order = np.lexsort(coords.T[::-1]) if rank else np.arange(len(coords))
    coords = coords[order]
    if len(coords) > 1 and (coords[1:] == coords[:-1]).all(axis=1).any():
        raise reader.fail("a chunk recorded twice")
    return Listing(coords, (addrs + np.uint64(reader.facts.base))[order], sizes[order], masks[order])
