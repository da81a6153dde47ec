"""Where a dataset's chunk index is: the superblock's sizes, the object header's Data Layout message.

libhdf5 opened the dataset already; these structures are read again through the source layer
(their bytes are in the read cache of a remote file) only to learn what no public API reports:
the index type, its address and its parameters.  Every field is checked against what h5py
reports of the dataset (rank, chunk shape, element size, filters, maximum shape).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ._base import DatasetFacts, Fetch, FileFacts, Unparsed
from ._lookup3 import checksums_ok

SIGNATURE = b"\x89HDF\r\n\x1a\n"
MSG_LAYOUT, MSG_CONTINUATION, MSG_BTREE_K = 0x0008, 0x0010, 0x0013
HEADER_READ = 512  # libhdf5 reads this much of an object header first: in the cache of a remote file
MAX_HEADER_BLOCKS = 64
INDEX_NAMES = {1: "single", 2: "implicit", 3: "farray", 4: "earray", 5: "btree2"}


@dataclass
class Layout:
    """A chunked dataset's Data Layout message."""

    version: int
    index: str  # "btree1", "single", "implicit", "farray", "earray", "btree2"
    address: int  # relative address of the index (or of the chunks: single, implicit)
    dims: tuple[int, ...]  # chunk shape plus the element size
    flags: int = 0  # version 4: bit 0 edge chunks unfiltered, bit 1 single chunk filtered
    params: dict[str, int] = field(default_factory=dict)


def le(data: bytes, at: int, width: int) -> int:
    if at < 0 or at + width > len(data):
        raise Unparsed("a header field lies beyond its message", "layout")
    return int.from_bytes(data[at:at + width], "little")


def file_facts(fetch: Fetch, sizes: tuple[int, int], userblock: int, eof: int) -> FileFacts:
    """The file's facts: libhdf5's sizes and user block (``fcpl``), checked against its superblock,
    and the chunk B-tree 'K' (superblock version 1, or a version 2/3 superblock's extension)."""
    sa, ss = (int(x) for x in sizes)
    if sa not in (4, 8) or ss not in (4, 8):
        raise Unparsed(f"addresses of {sa} bytes and lengths of {ss} bytes", "superblock")
    head = bytes(fetch([userblock], [min(96, max(0, eof - userblock))])[0])
    if head[:8] != SIGNATURE or len(head) < 24:
        raise Unparsed("no superblock where libhdf5 found one", "superblock")
    version = head[8]
    facts = FileFacts(sa, ss, userblock, eof)
    if version in (0, 1):
        if (head[13], head[14]) != (sa, ss):
            raise Unparsed("superblock sizes differ from libhdf5's", "superblock")
        return FileFacts(sa, ss, userblock, eof, le(head, 24, 2) if version == 1 else 32)
    if version in (2, 3):
        if (head[9], head[10]) != (sa, ss):
            raise Unparsed("superblock sizes differ from libhdf5's", "superblock")
        ext = le(head, 12 + sa, sa)
        if ext == facts.undefined:
            return facts
        for mtype, data in header_messages(fetch, facts, ext):
            if mtype == MSG_BTREE_K:
                if not data or data[0] != 0:
                    raise Unparsed("a B-tree 'K' message of an unknown version", "superblock")
                return FileFacts(sa, ss, userblock, eof, le(data, 1, 2))
        return facts
    raise Unparsed(f"superblock version {version}", "superblock")


def header_messages(fetch: Fetch, facts: FileFacts, addr: int) -> Iterator[tuple[int, bytes]]:
    """(type, data) of every message of the object header at relative ``addr``, continuations followed."""
    start = facts.base + addr
    if addr == facts.undefined or start >= facts.eof:
        raise Unparsed("object header beyond the end of the file", "layout")
    first = bytes(fetch([start], [min(HEADER_READ, facts.eof - start)])[0])
    if first[:4] == b"OHDR":
        yield from _v2_messages(fetch, facts, start, first)
    elif first[:1] == b"\x01":
        yield from _v1_messages(fetch, facts, start, first)
    else:
        raise Unparsed("an object header of an unknown version", "layout")


def _read(fetch: Fetch, facts: FileFacts, start: int, n: int, have: bytes = b"", at: int = 0) -> bytes:
    """Bytes ``start:start+n`` (absolute), from ``have`` (read at ``at``) when it holds them."""
    if start - at >= 0 and start + n <= at + len(have):
        return have[start - at:start - at + n]
    if n < 0 or start + n > facts.eof:
        raise Unparsed("an object header block beyond the end of the file", "layout")
    return bytes(fetch([start], [n])[0])


def _v1_messages(fetch: Fetch, facts: FileFacts, start: int, first: bytes) -> Iterator[tuple[int, bytes]]:
    nmsg, size = le(first, 2, 2), le(first, 8, 4)
    blocks = [_read(fetch, facts, start + 16, size, first, start)]
    seen = 0
    while blocks and seen < nmsg:
        body = blocks.pop(0)
        off = 0
        while off + 8 <= len(body) and seen < nmsg:
            mtype, msize, mflags = le(body, off, 2), le(body, off + 2, 2), body[off + 4]
            data = body[off + 8:off + 8 + msize]
            if len(data) != msize:
                raise Unparsed("a header message runs past its block", "layout")
            seen += 1
            off += 8 + msize
            if mtype == MSG_CONTINUATION:
                if len(blocks) + 1 > MAX_HEADER_BLOCKS:
                    raise Unparsed("too many object header blocks", "layout")
                where, length = le(data, 0, facts.sizeof_addr), le(data, facts.sizeof_addr, facts.sizeof_size)
                blocks.append(_read(fetch, facts, facts.base + where, length))
            elif mtype:
                yield mtype, (data if not mflags & 0x02 else b"\x00shared")


def _v2_messages(fetch: Fetch, facts: FileFacts, start: int, first: bytes) -> Iterator[tuple[int, bytes]]:
    version, flags = first[4], first[5]
    if version != 2 or flags & ~0x3F:
        raise Unparsed("a version 2 object header of unknown flags", "layout")
    at = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
    width = 1 << (flags & 0x03)
    size = le(first, at, width)
    raw = _read(fetch, facts, start, at + width + size + 4, first, start)
    yield from _v2_blocks(fetch, facts, [(raw, at + width, size)], flags)


def _v2_blocks(fetch: Fetch, facts: FileFacts, blocks: list, flags: int) -> Iterator[tuple[int, bytes]]:
    """Messages of version 2 header chunks ``(bytes, first message at, message bytes)``, each checksummed."""
    order = 2 if flags & 0x04 else 0
    count = 0
    while blocks:
        raw, start, size = blocks.pop(0)
        row = np.frombuffer(raw[:start + size + 4], np.uint8)[None]
        if len(raw) < start + size + 4 or not checksums_ok(row, np.asarray([start + size]))[0]:
            raise Unparsed("an object header checksum does not match", "layout")
        off, end = start, start + size
        while off + 4 + order <= end:
            mtype, msize, mflags = raw[off], le(raw, off + 1, 2), raw[off + 3]
            data = raw[off + 4 + order:off + 4 + order + msize]
            if off + 4 + order + msize > end:
                raise Unparsed("a header message runs past its block", "layout")
            off += 4 + order + msize
            if mtype == MSG_CONTINUATION:
                count += 1
                if count > MAX_HEADER_BLOCKS:
                    raise Unparsed("too many object header blocks", "layout")
                where, length = le(data, 0, facts.sizeof_addr), le(data, facts.sizeof_addr, facts.sizeof_size)
                more = _read(fetch, facts, facts.base + where, length)
                if more[:4] != b"OCHK" or length < 8:
                    raise Unparsed("a continuation block without its signature", "layout")
                blocks.append((more, 4, length - 8))
            elif mtype:
                yield mtype, (data if not mflags & 0x02 else b"\x00shared")


def dataset_layout(fetch: Fetch, facts: FileFacts, ds: DatasetFacts) -> Layout:
    """The Data Layout message of ``ds``, checked against what libhdf5 reports of it."""
    found = [data for mtype, data in header_messages(fetch, facts, ds.header) if mtype == MSG_LAYOUT]
    if len(found) != 1:
        raise Unparsed(f"{len(found)} layout messages in the object header", "layout")
    layout = decode_layout(found[0], facts)
    rank = len(ds.chunks)
    itemsize = ds.itemsize if ds.itemsize is not None else (layout.dims[-1] if layout.dims else 0)
    if layout.dims != tuple(ds.chunks) + (itemsize,) or itemsize <= 0:
        raise Unparsed(f"the layout message's chunk shape {layout.dims} is not libhdf5's "
                       f"{tuple(ds.chunks)} of {ds.itemsize}-byte elements", layout.index)
    unlimited = sum(m is None for m in ds.maxshape)
    expect = {"earray": unlimited == 1, "btree2": unlimited > 1,
              "farray": not unlimited, "implicit": not unlimited and not ds.filtered,
              "single": True, "btree1": True}
    if not expect.get(layout.index, False) or len(ds.shape) != rank:
        raise Unparsed(f"a {layout.index} index for a dataset of maximum shape {ds.maxshape}", layout.index)
    if layout.index == "single" and bool(layout.flags & 0x02) != ds.filtered:
        raise Unparsed("the single chunk's filter flag differs from the dataset's filters", layout.index)
    return layout


def decode_layout(data: bytes, facts: FileFacts) -> Layout:
    """A chunked Data Layout message (versions 1 to 4), as stored."""
    if not data:
        raise Unparsed("an empty layout message", "layout")
    version, sa = data[0], facts.sizeof_addr
    if version in (1, 2):
        ndims, cls = le(data, 1, 1), le(data, 2, 1)
        if cls != 2:
            raise Unparsed(f"layout class {cls}", "layout")
        addr = le(data, 8, sa)
        return Layout(version, "btree1", addr, tuple(le(data, 8 + sa + 4 * i, 4) for i in range(ndims)))
    if version == 3:
        cls, ndims = le(data, 1, 1), le(data, 2, 1)
        if cls != 2:
            raise Unparsed(f"layout class {cls}", "layout")
        return Layout(3, "btree1", le(data, 3, sa), tuple(le(data, 3 + sa + 4 * i, 4) for i in range(ndims)))
    if version not in (4, 5):  # 5 (HDF5 2.0): version 4's fields; only the index records' size fields differ
        raise Unparsed(f"layout message version {version}", "layout")
    return _decode_v4(data, facts)


def _decode_v4(data: bytes, facts: FileFacts) -> Layout:
    cls, flags, ndims, width = le(data, 1, 1), le(data, 2, 1), le(data, 3, 1), le(data, 4, 1)
    if cls != 2:
        raise Unparsed(f"layout class {cls}", "layout")
    if flags & ~0x03 or not 1 <= width <= 8:
        raise Unparsed(f"layout flags {flags}, dimension sizes of {width} bytes", "layout")
    dims = tuple(le(data, 5 + width * i, width) for i in range(ndims))
    at = 5 + width * ndims
    kind = le(data, at, 1)
    name = INDEX_NAMES.get(kind)
    if name is None:
        raise Unparsed(f"chunk index type {kind}", "layout")
    at += 1
    params: dict[str, int] = {}
    if name == "single" and flags & 0x02:
        params = {"size": le(data, at, facts.sizeof_size), "mask": le(data, at + facts.sizeof_size, 4)}
        at += facts.sizeof_size + 4
    elif name == "farray":
        params = {"page_bits": le(data, at, 1)}
        at += 1
    elif name == "earray":
        keys = ("max_bits", "index_elements", "min_pointers", "min_elements", "page_bits")
        params = {k: le(data, at + i, 1) for i, k in enumerate(keys)}
        at += 5
    elif name == "btree2":
        params = {"node_size": le(data, at, 4), "split": le(data, at + 4, 1), "merge": le(data, at + 5, 1)}
        at += 6
    return Layout(data[0], name, le(data, at, facts.sizeof_addr), dims, flags, params)
