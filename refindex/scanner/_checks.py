"""Checks of what the file's indexes say against what libhdf5 reads.

A damaged file can list chunks its reads never use, or store bytes that decode to other
values than libhdf5 returns; an index built on the listing would be silently wrong.
Local files are checked by default (remotely each sampled chunk is a request).
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

from ..codecs import SZIP_CODEC_IDS, codec_pipeline, string_padding, szip_shortfall
from ..checks.compare import records_equal, values_of
from ..model import ArrayNode, ChunkTable
from ._context import ScanContext

MiB = 1 << 20
LOOKUP_SAMPLE, LOOKUP_BUDGET = 64, 4 << 20  # chunks read through libhdf5's lookup to check the listing
SZIP_BUDGET = 32 << 20  # stored bytes of szip chunks whose streams are decoded at scan time (~0.7 s)


def chunk_origin(coord: Any, chunks: Any, ndim: int) -> tuple[int, ...]:
    """Element offset of the chunk at grid position ``coord`` (libhdf5's chunk address)."""
    return tuple(int(c) * int(s) for c, s in zip(list(coord)[:ndim], chunks))


def damaged_table(ctx: ScanContext, table: ChunkTable) -> str | None:
    """Why a chunk table cannot describe real chunks (a damaged file), or None."""
    if not len(table):
        return None
    step = 1 << 20  # checked a million rows at a time: temporaries stay small for 10^7 chunks
    end = np.uint64(ctx.file_size)
    for lo in range(0, len(table), step):
        sizes = table.sizes[lo:lo + step]
        if (sizes == 0).any():
            return "a chunk of size 0"
        if ((sizes > end) | (table.offsets[lo:lo + step] > end - np.minimum(sizes, end))).any():  # no overflow
            return "a chunk beyond the end of the file"
    c = table.coords
    span = c.max(axis=0).astype(np.float64) + 1
    if float(np.prod(span)) < 2**62:  # linear chunk numbers: one int64 sort
        dims = tuple(int(x) for x in span)
        ordered, last = True, -1
        for lo in range(0, len(c), step):  # B-tree order is C order: then sorted, without duplicates
            part = np.ravel_multi_index(tuple(c[lo:lo + step].T), dims)
            if part[0] <= last or not bool((part[1:] > part[:-1]).all()):
                ordered = False
                break
            last = int(part[-1])
        if ordered:
            dup = False
        else:
            linear = np.ravel_multi_index(tuple(c.T), dims)
            s = np.sort(linear)  # ~20x faster than np.unique's hashing for 10^5+ chunks
            dup = bool((s[1:] == s[:-1]).any())
    else:
        dup = len(np.unique(c, axis=0)) != len(c)
    if dup:
        return "the same chunk listed twice"
    return None


def lookups_disagree(ctx: ScanContext, d: h5py.Dataset, table: ChunkTable, chunks: Any) -> bool:
    """Does libhdf5's read path find other bytes than ``chunk_iter`` listed for some chunk?

    libhdf5 reads a chunk by looking its position up in the index; a damaged index can
    list a chunk that the lookup misses (libhdf5 then reads fill values there) or finds
    elsewhere.  ``read_direct_chunk`` goes through that lookup: all chunks of small tables
    are compared with the listed bytes, an even sample of larger ones, within a byte budget.
    """
    n = len(table)
    if not n or not ctx.want_sample_check():
        return False
    ndim = len(d.shape)
    mean = max(1, int(table.sizes.mean()))
    k = max(3, min(n, LOOKUP_SAMPLE, LOOKUP_BUDGET // mean))
    rows = sorted(set(np.linspace(0, n - 1, k).astype(np.int64).tolist()))
    for i in rows:
        try:
            _, raw = d.id.read_direct_chunk(chunk_origin(table.coords[i].tolist(), chunks, ndim))
        except Exception:
            return True  # "chunk storage is not allocated": the lookup misses a listed chunk
        if len(raw) != int(table.sizes[i]) or bytes(raw) != ctx.read_file(None, int(table.offsets[i]), len(raw)):
            return True
    return False


def chunk_agrees(d: h5py.Dataset, node: ArrayNode, nd: np.dtype, coord: Any, raw: bytes) -> bool:
    """Does ``raw`` (one chunk as stored) decode with the array's pipeline to libhdf5's values?"""
    ndim = len(d.shape)
    try:
        buf: Any = raw
        for codec in reversed(codec_pipeline(node.filters, node.compressor)):
            buf = codec.decode(buf)
        got = np.frombuffer(bytes(buf), dtype=nd).reshape(node.chunks)
    except Exception:
        return False
    sel = tuple(slice(int(c) * s, min((int(c) + 1) * s, n)) for c, s, n in zip(coord[:ndim], node.chunks, d.shape))
    try:
        want = np.asarray(values_of(d)[sel])
    except Exception:
        return True  # libhdf5 cannot convert these values: nothing to compare the bytes with
    return records_equal(want, got[tuple(slice(0, x.stop - x.start) for x in sel)])


def contiguous_agrees(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, nd: np.dtype, offset: int) -> bool:
    """Compare the first rows (up to 64 KiB) of contiguous storage with libhdf5's values."""
    shape = node.shape
    row = nd.itemsize * int(np.prod(shape[1:], dtype=np.int64)) if shape else nd.itemsize
    if row > 16 * MiB:
        return True  # too large to sample cheaply
    rows = max(1, min(shape[0], (64 << 10) // max(row, 1))) if shape else 1
    raw = ctx.read_file(None, offset, rows * row)
    strpad = string_padding(d.id.get_type())
    try:
        buf: Any = raw
        for codec in reversed(codec_pipeline([strpad] if strpad else None, None)):
            buf = codec.decode(buf)
        got = np.frombuffer(bytes(buf), dtype=nd)
    except Exception:
        return False
    try:
        want = np.asarray(values_of(d)[:rows] if shape else values_of(d)[()])
    except Exception:
        return True  # libhdf5 cannot convert these values: nothing to compare the bytes with
    return records_equal(want.reshape(-1) if want.ndim else want.reshape(1), got.reshape(-1)[: want.size])


def unfiltered_edge_chunks(d: h5py.Dataset, node: ArrayNode, table: ChunkTable, chunk_nbytes: int,
                           nd: np.dtype) -> np.ndarray:
    """Partial edge chunks stored without filters (H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS).

    h5py does not expose that dataset option, and such chunks report filter_mask 0.
    They have exactly the raw chunk size, so only those candidates are decoded with
    the array's pipeline and compared with libhdf5's values.
    """
    flags = np.zeros(len(table), dtype=bool)
    if not (node.filters or node.compressor) or not len(table) or not d.shape:
        return flags
    ndim = len(d.shape)
    chunks = np.asarray(node.chunks[:ndim], np.int64)
    shape = np.asarray(d.shape, np.int64)
    if not (shape % chunks).any():
        return flags  # the chunks tile the extent: no partial edge chunk
    partial = (((table.coords[:, :ndim] + 1) * chunks) > shape).any(axis=1)
    cands = np.nonzero(partial & (table.sizes == np.uint64(chunk_nbytes)))[0]
    if not len(cands):
        return flags
    for i in cands:
        coord = table.coords[i]
        raw = bytes(d.id.read_direct_chunk(chunk_origin(coord, node.chunks, ndim))[1])  # through h5py's own reads
        flags[i] = not chunk_agrees(d, node, nd, coord, raw)
    return flags


def unfiltered_size_mismatch(dsid: Any, dcpl: Any, table: ChunkTable) -> str | None:
    """Why the chunk sizes of a dataset without filters cannot be right, or None.

    Without filters every chunk is stored at its full size, edge chunks too.  A listed
    size other than that (a damaged filter-pipeline message or chunk index) makes libhdf5
    read a short chunk and fill the rest from uninitialised memory: values that differ
    from read to read, which no index can agree with.
    """
    if dcpl.get_nfilters() or not len(table):
        return None
    full = dsid.get_type().get_size() * int(np.prod(dcpl.get_chunk(), dtype=np.int64))
    bad = np.nonzero(table.sizes != np.uint64(full))[0]
    if not len(bad):
        return None
    where = tuple(int(c) for c in table.coords[bad[0]])
    return (f"chunk {where} of a dataset without filters is stored in {int(table.sizes[bad[0]])} bytes, "
            f"not the chunk's {full} ({len(bad)} such chunk(s))")


def damaged_szip_chunk(ctx: ScanContext, node: ArrayNode, table: ChunkTable, odd: np.ndarray,
                       chunk_nbytes: int, budget: int = SZIP_BUDGET) -> str | None:
    """Why one stored szip chunk has no defined values (a stream that ends early), or None.

    libaec hands libhdf5 (scanlines that are not a whole number of blocks) and the stock
    ``imagecodecs_szip`` codec (every layout) uninitialised memory for whatever a damaged
    stream lacks (:func:`~refindex.codecs.szip_shortfall`): values that differ between reads,
    which no index can agree with.  Every chunk's stream is decoded while the stored bytes
    stay within ``budget``, else an even sample of that many bytes.
    """
    chain = codec_pipeline(node.filters, node.compressor)
    at = [i for i, c in enumerate(chain) if getattr(c, "codec_id", "") in SZIP_CODEC_IDS]
    if not at or not len(table) or not ctx.want_sample_check():
        return None
    sz = chain[at[-1]]
    params = (sz.options_mask, sz.pixels_per_block, sz.bits_per_pixel, sz.pixels_per_scanline)
    after = chain[at[-1] + 1:]  # applied after szip when writing: undone first
    # With only byte shuffling before it, szip compressed exactly one chunk.
    same_size = all(getattr(c, "codec_id", "") == "shuffle" for c in chain[:at[-1]])
    rows = np.nonzero(~odd)[0]
    total = int(table.sizes[rows].sum()) if len(rows) else 0
    if total > budget:
        rows = rows[np.unique(np.linspace(0, len(rows) - 1, max(3, len(rows) * budget // total)).astype(np.int64))]
    url = None if table.url in (None, ctx.url) else table.url
    for lo in range(0, len(rows), 256):
        part = rows[lo:lo + 256]
        for i, raw in zip(part, ctx.read_many(url, table.offsets[part].tolist(), table.sizes[part].tolist())):
            try:
                buf: Any = raw
                for codec in reversed(after):
                    buf = codec.decode(buf)
            except Exception:  # noqa: BLE001 - e.g. a bad Fletcher32 checksum: every reader refuses it
                continue
            buf = bytes(buf)
            where = tuple(int(c) for c in table.coords[i])
            claimed = int.from_bytes(buf[:4], "little")
            if (claimed != chunk_nbytes) if same_size else (claimed > 2 * chunk_nbytes + 1024):
                return f"damaged szip chunk {where}: its header claims {claimed} bytes for a chunk of {chunk_nbytes}"
            short = szip_shortfall(buf, *params)
            if short:
                return (f"damaged szip chunk {where}: its stream decodes to {short[0]} of {short[1]} bytes, and "
                        "libaec fills the rest with uninitialised memory (values that differ from read to read)")
    return None
