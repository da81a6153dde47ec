"""Fixed arrays (layout version 4, fixed maximum shape): one element per chunk of the maximum
chunk grid, in C order.

Header ``FAHD`` (client, element size, page bits, number of elements, data block address),
data block ``FADB`` (header address, then either the elements or, when there are more than
2^page bits, a bitmap of initialised pages followed by the pages themselves, each with its
checksum).  An element is the chunk's address (unfiltered) or address, stored size
(``Reader.size_width`` bytes) and filter mask.  Every checksum is verified.
"""

from __future__ import annotations

import numpy as np

from ._base import DatasetFacts, Listing, Reader, batches, signature_ok, uint, unravel
from ._layout import Layout
from ._lookup3 import checksums_ok


def element_size(reader: Reader, ds: DatasetFacts) -> int:
    sa = reader.facts.sizeof_addr
    return sa + reader.size_width + 4 if ds.filtered else sa


def decode_elements(reader: Reader, ds: DatasetFacts, rows: np.ndarray, numbers: np.ndarray, grid: np.ndarray,
                    limit: int | None = None) -> Listing:
    """Chunks of ``(n, element size)`` elements numbered ``numbers`` in C order over ``grid`` (its first
    dimension unbounded); elements at the undefined address, or numbered ``limit`` or beyond, are not chunks."""
    sa = reader.facts.sizeof_addr
    addrs = uint(rows, 0, sa)
    keep = reader.defined(addrs)
    if limit is not None:
        keep &= numbers < np.uint64(limit)
    if ds.filtered:
        width = reader.size_width
        sizes, masks = uint(rows, sa, width)[keep], uint(rows, sa + width, 4)[keep].astype(np.uint32)
    else:
        sizes = np.full(int(keep.sum()), ds.chunk_bytes, np.uint64)
        masks = np.zeros(len(sizes), np.uint32)
    coords = unravel(numbers[keep], grid)
    return Listing(coords, addrs[keep] + np.uint64(reader.facts.base), sizes, masks)


def read_farray(reader: Reader, ds: DatasetFacts, layout: Layout, progress=None) -> Listing:
    facts, rank = reader.facts, len(ds.chunks)
    sa, ss = facts.sizeof_addr, facts.sizeof_size
    head = reader.header(layout.address, 12 + ss + sa, "fixed array header", b"FAHD", int(ds.filtered),
                         "a fixed array header that is not this dataset's (signature, client or checksum)")
    esize = element_size(reader, ds)
    if head[0, 6] != esize or head[0, 7] != layout.params.get("page_bits"):
        raise reader.fail("a fixed array header whose element size or page bits differ from the layout's")
    nelmts = int(uint(head, 8, ss)[0])
    if nelmts != int(np.prod(ds.grid(ds.maxshape), dtype=np.int64)):
        raise reader.fail("a fixed array of another length than the maximum chunk grid")
    dblock = int(uint(head, 8 + ss, sa)[0])
    if dblock == facts.undefined or not nelmts:
        return Listing.empty(rank)
    page = 1 << int(head[0, 7])
    if nelmts <= page:
        size = 6 + sa + nelmts * esize + 4
        block = reader.one(dblock, size, "fixed array data block")
        _check_block(reader, block, size - 4, layout.address, ds)
        rows = np.ascontiguousarray(block[:, 6 + sa:6 + sa + nelmts * esize]).reshape(nelmts, esize)
        out = decode_elements(reader, ds, rows, np.arange(nelmts, dtype=np.uint64), ds.grid(ds.maxshape))
        if progress is not None:
            progress(len(out))
        return out
    return _paged(reader, ds, layout, dblock, nelmts, page, esize, progress)


def _check_block(reader: Reader, block: np.ndarray, checked: int, header: int, ds: DatasetFacts) -> None:
    sa = reader.facts.sizeof_addr
    if not signature_ok(block, b"FADB")[0] or block[0, 4] != 0 or block[0, 5] != int(ds.filtered) \
            or int(uint(block, 6, sa)[0]) != header or not checksums_ok(block, np.asarray([checked]))[0]:
        raise reader.fail("a fixed array data block that is not this array's (signature, header or checksum)")


def _paged(reader: Reader, ds: DatasetFacts, layout: Layout, dblock: int, nelmts: int, page: int, esize: int,
           progress) -> Listing:
    """A data block of pages: its bitmap says which pages were written; each page is checksummed."""
    sa = reader.facts.sizeof_addr
    npages = -(-nelmts // page)
    bitmap = -(-npages // 8)
    prefix = 6 + sa + bitmap + 4
    block = reader.one(dblock, prefix, "fixed array data block")
    _check_block(reader, block, prefix - 4, layout.address, ds)
    bits = np.unpackbits(block[0, 6 + sa:6 + sa + bitmap])[:npages].astype(bool)  # first page: highest bit
    pages = np.nonzero(bits)[0]
    page_bytes = page * esize + 4
    parts = []
    for part in batches(len(pages), page_bytes):
        which = pages[part]
        counts = np.minimum(page, nelmts - which * page)
        addrs = np.uint64(dblock) + np.uint64(prefix) + which.astype(np.uint64) * np.uint64(page_bytes)
        rows = reader.rows_sized(addrs, counts * esize + 4, page_bytes, "fixed array page")
        if not checksums_ok(rows, counts * esize).all():
            raise reader.fail("a fixed array page checksum does not match")
        elements = rows[:, :page * esize].reshape(-1, esize)
        numbers = (which[:, None] * page + np.arange(page)).reshape(-1)
        real = (np.arange(page) < counts[:, None]).reshape(-1)
        parts.append(decode_elements(reader, ds, elements[real], numbers[real].astype(np.uint64),
                                      ds.grid(ds.maxshape)))
        if progress is not None:
            progress(len(parts[-1]))
    return Listing.concat(parts, len(ds.chunks))
