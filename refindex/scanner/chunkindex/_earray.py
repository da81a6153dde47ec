"""Extensible arrays (layout version 4, one unlimited dimension): one element per chunk, numbered
in C order with the unlimited dimension moved first ("swizzled").

Header ``EAHD`` -> index block ``EAIB`` (the first elements, the first data blocks' addresses,
super block addresses) -> super blocks ``EASB`` (data block addresses, a bitmap of written
pages) -> data blocks ``EADB`` (elements, or pages of elements each with its checksum).  Super
block ``u`` holds ``2^(u//2)`` data blocks of ``2^((u+1)//2) x min elements`` elements; the
first super blocks' data blocks hang off the index block directly.  Read a level at a time:
header, index block, super blocks with the index block's data blocks, then the rest.

libhdf5's own ``chunk_iter`` (and ``get_chunk_info_by_coord``) number these chunks without the
swizzle when the unlimited dimension is not the first (HDF5 2.0): its positions are wrong there
while its reads are right.  This reader follows the reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import DatasetFacts, Listing, Reader, batches, signature_ok, uint
from ._farray import decode_elements, element_size
from ._layout import Layout
from ._lookup3 import checksums_ok


@dataclass
class Blocks:
    """Data blocks to read: address, first element number (in the data-block space), elements."""

    addrs: list[int]
    first: list[int]
    counts: list[int]
    pages: list[np.ndarray | None]  # per block: which pages were written (None: not paged)
    stored: list[int]  # the block offset each block records of itself (see :func:`_direct_blocks`)


def read_earray(reader: Reader, ds: DatasetFacts, layout: Layout, progress=None) -> Listing:
    facts, rank = reader.facts, len(ds.chunks)
    hdr = _header(reader, ds, layout)
    if not hdr["max_idx"] or not reader.defined(np.asarray([hdr["iblock"]]))[0]:
        return Listing.empty(rank)
    esize, sa = hdr["esize"], facts.sizeof_addr
    info = _super_blocks(hdr)
    hdr["grid"] = _swizzled_grid(reader, ds)
    nib = 2 * int(np.log2(hdr["min_pointers"]))
    ndb, nsb = 2 * (hdr["min_pointers"] - 1), len(info) - nib
    ib_size = 6 + sa + hdr["index_elements"] * esize + (ndb + nsb) * sa + 4
    ib = reader.one(hdr["iblock"], ib_size, "extensible array index block")
    _check(reader, ib, b"EAIB", ib_size - 4, layout.address, ds)
    at = 6 + sa
    parts = []
    n_direct = min(hdr["index_elements"], hdr["max_idx"])
    if n_direct:
        rows = ib[0, at:at + n_direct * esize].reshape(n_direct, esize)
        parts.append(decode_elements(reader, ds, rows, np.arange(n_direct, dtype=np.uint64), hdr["grid"]))
    at += hdr["index_elements"] * esize
    dblk_addrs = uint(ib[:, at:at + ndb * sa].reshape(ndb, sa), 0, sa) if ndb else np.zeros(0, np.uint64)
    sblk_addrs = uint(ib[:, at + ndb * sa:at + (ndb + nsb) * sa].reshape(nsb, sa), 0, sa) if nsb else \
        np.zeros(0, np.uint64)
    limit = hdr["max_idx"] - hdr["index_elements"]  # elements set in the data-block space
    blocks = _direct_blocks(reader, info[:nib], dblk_addrs, limit, hdr)
    more = _via_super_blocks(reader, ds, layout, info, nib, sblk_addrs, limit, hdr)
    for group in (blocks, more):
        parts += _read_blocks(reader, ds, layout, group, hdr, progress)
    out = Listing.concat(parts, rank)
    return _swizzled(reader, ds, out)


def _header(reader: Reader, ds: DatasetFacts, layout: Layout) -> dict[str, int]:
    facts = reader.facts
    sa, ss = facts.sizeof_addr, facts.sizeof_size
    h = reader.header(layout.address, 12 + 6 * ss + sa + 4, "extensible array header", b"EAHD", int(ds.filtered),
                      "an extensible array header that is not this dataset's (signature, client or checksum)")
    hdr = {"esize": int(h[0, 6]), "max_bits": int(h[0, 7]), "index_elements": int(h[0, 8]),
           "min_elements": int(h[0, 9]), "min_pointers": int(h[0, 10]), "page_bits": int(h[0, 11]),
           "max_idx": int(uint(h, 12 + 4 * ss, ss)[0]), "iblock": int(uint(h, 12 + 6 * ss, sa)[0])}
    p = layout.params
    same = (hdr["max_bits"], hdr["index_elements"], hdr["min_pointers"], hdr["min_elements"], hdr["page_bits"]) == \
        (p.get("max_bits"), p.get("index_elements"), p.get("min_pointers"), p.get("min_elements"), p.get("page_bits"))
    powers = all(x and not x & (x - 1) for x in (hdr["min_elements"], hdr["min_pointers"]))
    if not same or not powers or hdr["esize"] != element_size(reader, ds) or not 0 < hdr["max_bits"] <= 64 \
            or hdr["min_elements"] > 1 << hdr["max_bits"] or hdr["max_idx"] > 1 << hdr["max_bits"]:
        raise reader.fail("extensible array parameters that differ from the layout's or are not powers of two")
    hdr["offset_size"] = (hdr["max_bits"] + 7) // 8
    return hdr


def _super_blocks(hdr: dict[str, int]) -> list[tuple[int, int, int, int]]:
    """Per super block: (data blocks, elements per data block, first element, first data block)."""
    out, start, first_dblk = [], 0, 0
    for u in range(1 + hdr["max_bits"] - int(np.log2(hdr["min_elements"]))):
        ndblks, nelmts = 1 << (u // 2), (1 << ((u + 1) // 2)) * hdr["min_elements"]
        out.append((ndblks, nelmts, start, first_dblk))
        start += ndblks * nelmts
        first_dblk += ndblks
    return out


def _direct_blocks(reader: Reader, info: list, addrs: np.ndarray, limit: int, hdr: dict) -> Blocks:
    """The data blocks whose addresses the index block holds.

    libhdf5 records in such a block the offset ``start + (first data block + j) x elements``: it counts
    the block's number among all data blocks, not within its super block (the elements themselves
    are placed from ``start + j x elements``, as reads expect).
    """
    out = Blocks([], [], [], [], [])
    page = 1 << hdr["page_bits"]
    for ndblks, nelmts, start, first_dblk in info:
        for j in range(ndblks):
            first = start + j * nelmts
            if first >= limit or not reader.defined(addrs[first_dblk + j:first_dblk + j + 1])[0]:
                continue
            if nelmts > page:
                raise reader.fail("a paged data block directly under the index block")
            out.addrs.append(int(addrs[first_dblk + j]))
            out.first.append(first)
            out.counts.append(nelmts)
            out.pages.append(None)
            out.stored.append(start + (first_dblk + j) * nelmts)
    return out


def _via_super_blocks(reader: Reader, ds: DatasetFacts, layout: Layout, info: list, nib: int,
                      sblk_addrs: np.ndarray, limit: int, hdr: dict) -> Blocks:
    """The super blocks' data blocks (the super blocks read together, one fetch)."""
    sa, aos = reader.facts.sizeof_addr, hdr["offset_size"]
    page = 1 << hdr["page_bits"]
    wanted = [(k, u) for k, u in enumerate(range(nib, len(info)))
              if info[u][2] < limit and reader.defined(sblk_addrs[k:k + 1])[0]]
    out = Blocks([], [], [], [], [])
    if not wanted:
        return out
    sizes = []
    for _, u in wanted:
        ndblks, nelmts = info[u][0], info[u][1]
        npages = nelmts // page if nelmts > page else 0
        sizes.append(6 + sa + aos + ndblks * (-(-npages // 8)) + ndblks * sa + 4)
    rows = reader.rows_sized(np.asarray([sblk_addrs[k] for k, _ in wanted], np.uint64), np.asarray(sizes),
                             max(sizes), "extensible array super block")
    for row, (_, u), size in zip(rows, wanted, sizes):
        ndblks, nelmts, start, _ = info[u]
        _check(reader, row[None], b"EASB", size - 4, layout.address, ds)
        if int(uint(row[None], 6 + sa, aos)[0]) != start:
            raise reader.fail("a super block at another position in the array than its place")
        npages = nelmts // page if nelmts > page else 0
        at = 6 + sa + aos
        bits = np.unpackbits(row[at:at + ndblks * (-(-npages // 8))]) if npages else None
        at += ndblks * (-(-npages // 8))
        addrs = uint(row[at:at + ndblks * sa].reshape(ndblks, sa), 0, sa)
        for j in range(ndblks):
            first = start + j * nelmts
            if first >= limit or not reader.defined(addrs[j:j + 1])[0]:
                continue
            out.addrs.append(int(addrs[j]))
            out.first.append(first)
            out.counts.append(nelmts)
            out.pages.append(None if bits is None else bits[j * npages:(j + 1) * npages].astype(bool))
            out.stored.append(first)
    return out


def _check(reader: Reader, rows: np.ndarray, magic: bytes, checked: np.ndarray | int, header: int,
           ds: DatasetFacts) -> None:
    """Every row is a block of this array: signature, version, client, header address and checksum."""
    sa = reader.facts.sizeof_addr
    checked = np.broadcast_to(np.asarray(checked, np.int64), (len(rows),))
    if not signature_ok(rows, magic).all() or (rows[:, 4] != 0).any() or (rows[:, 5] != int(ds.filtered)).any() \
            or (uint(rows, 6, sa) != np.uint64(header)).any() or not checksums_ok(rows, checked).all():
        raise reader.fail(f"an extensible array {magic.decode()} block that is not this array's "
                          "(signature, header address or checksum)")


def _read_blocks(reader: Reader, ds: DatasetFacts, layout: Layout, blocks: Blocks, hdr: dict,
                 progress) -> list[Listing]:
    """Elements of data blocks (one fetch per batch of blocks); unpaged blocks whole, paged ones prefix and pages."""
    sa, aos, esize = reader.facts.sizeof_addr, hdr["offset_size"], hdr["esize"]
    prefix = 6 + sa + aos + 4
    parts: list[Listing] = []
    page = 1 << hdr["page_bits"]
    paged = np.asarray([p is not None for p in blocks.pages], bool)
    counts = np.asarray(blocks.counts, np.int64)
    sizes = prefix + counts * esize + np.where(paged, (counts // page) * 4, 0)
    checked = np.where(paged, prefix - 4, prefix - 4 + counts * esize)
    for part in batches(len(sizes), int(sizes.max(initial=1))):
        idx = np.arange(len(sizes))[part]
        rows = reader.rows_sized(np.asarray(blocks.addrs, np.uint64)[idx], sizes[idx], int(sizes[idx].max()),
                                 "extensible array data block")
        _check(reader, rows, b"EADB", checked[idx], layout.address, ds)
        if (uint(rows, 6 + sa, aos) != np.asarray(blocks.stored, np.uint64)[idx]).any():
            raise reader.fail("a data block at another position in the array than its place")
        for row, i in zip(rows, idx.tolist()):
            n, first, pages = blocks.counts[i], hdr["index_elements"] + blocks.first[i], blocks.pages[i]
            if pages is None:
                body = row[prefix - 4:prefix - 4 + n * esize].reshape(n, esize)
                numbers = np.arange(n, dtype=np.uint64) + np.uint64(first)
            else:
                body, numbers = _pages(reader, row[prefix:prefix + (n // page) * (page * esize + 4)], pages,
                                       page, esize, first)
            parts.append(decode_elements(reader, ds, body, numbers, hdr["grid"], hdr["max_idx"]))
            if progress is not None:
                progress(len(parts[-1]))
    return parts


def _pages(reader: Reader, raw: np.ndarray, written: np.ndarray, page: int, esize: int,
           first: int) -> tuple[np.ndarray, np.ndarray]:
    """Elements of a paged data block's written pages, each page's checksum verified."""
    pages = raw.reshape(len(written), page * esize + 4)[written]
    if not checksums_ok(pages, np.full(len(pages), page * esize)).all():
        raise reader.fail("an extensible array page checksum does not match")
    numbers = (np.nonzero(written)[0][:, None] * page + np.arange(page)).reshape(-1).astype(np.uint64)
    return pages[:, :page * esize].reshape(-1, esize), numbers + np.uint64(first)


def _unlimited(reader: Reader, ds: DatasetFacts) -> int:
    u = [i for i, m in enumerate(ds.maxshape) if m is None]
    if len(u) != 1:
        raise reader.fail("an extensible array index of a dataset without exactly one unlimited dimension")
    return u[0]


def _swizzled_grid(reader: Reader, ds: DatasetFacts) -> np.ndarray:
    """Maximum chunks per dimension, the unlimited one first (its entry unused: unbounded)."""
    u = _unlimited(reader, ds)
    return np.asarray([0] + [-(-int(ds.maxshape[i]) // ds.chunks[i]) for i in range(len(ds.chunks)) if i != u],
                      np.int64)


def _swizzled(reader: Reader, ds: DatasetFacts, listing: Listing) -> Listing:
    """Element numbers were unravelled over the maximum grid as if the unlimited dimension came first;
    put it back where it is (libhdf5 moves it first to number chunks)."""
    u = _unlimited(reader, ds)
    if u == 0 or not len(listing):
        return listing
    rank = len(ds.chunks)
    order = [u] + [i for i in range(rank) if i != u]  # swizzled position k holds dimension order[k]
    coords = np.empty_like(listing.coords)
    coords[:, order] = listing.coords
    return Listing(coords, listing.offsets, listing.sizes, listing.masks)
