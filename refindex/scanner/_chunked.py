"""Chunked storage: every stored chunk referenced where it lies, as the file's chunk index lists it.

Chunks libhdf5 wrote with some filters skipped, and partial edge chunks stored unfiltered,
cannot be decoded with the array's pipeline: they are decoded by libhdf5 and stored
inline, re-encoded.  Tiny chunks are copied in (``inline_threshold``).
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

from ..codecs import DTypePlan, NoCodec, encode_chunk, filter_list, lzf_within_stock_ratio, pipeline, refindex_lzf
from ..checks.compare import values_of
from ..errors import RefindexError
from ..model import ArrayNode, ChunkTable, chunk_key
from ._checks import (chunk_agrees, chunk_origin, damaged_szip_chunk, damaged_table, lookups_disagree,
                      unfiltered_edge_chunks, unfiltered_size_mismatch)
from ._context import ScanContext, fill_value_of
from ._inline import inline_decoded
from ._listing import listed_chunks

BULK_INLINE = 10_000  # more tiny chunks than this are read in merged ranges, not one by one


def chunked(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, plan: DTypePlan, nd: np.dtype, dcpl: Any,
            strpad: dict | None = None) -> ArrayNode:
    dsid = d.id
    chunks = tuple(int(c) for c in dcpl.get_chunk()) + plan.extra_shape
    node.chunks = chunks
    itemsize = nd.itemsize
    chunk_nbytes = int(np.prod(chunks, dtype=np.int64)) * itemsize
    try:
        node.filters, node.compressor = pipeline(filter_list(dcpl), itemsize, chunk_nbytes, len(chunks),
                                                 stock=ctx.stock_codec if ctx.opts.portable else None)
    except NoCodec as e:
        return inline_decoded(ctx, d, node, plan, str(e))
    if strpad:  # applied last when reading: after every HDF5 filter is undone
        node.filters = [strpad] + (node.filters or [])
    with ctx.reading("index", node.path):  # the chunk index's nodes: tagged for the index's pages
        table, masks, why = listed_chunks(ctx, d, len(node.shape) - len(plan.extra_shape), chunks, plan.extra_shape,
                                          dcpl)
    if why:
        return inline_decoded(ctx, d, node, plan, why)
    # Chunks left beyond the current extent (a dataset shrunk after writing) hold no elements.
    grid = np.asarray([-(-n // c) for n, c in zip(node.shape, chunks)], dtype=np.int64)
    inside = (table.coords < grid).all(axis=1) if len(table) else np.zeros(0, bool)
    why = damaged_table(ctx, table) or unfiltered_size_mismatch(dsid, dcpl, table)
    if why:
        raise ctx.fail(node.path, f"damaged chunk index: {why}", RefindexError)
    if not inside.all():
        # libhdf5 reports chunk positions outside the extent: its chunk index and its
        # read path disagree (seen with extensible-array indexes from older writers),
        # so only values read through libhdf5 are trustworthy.
        return inline_decoded(ctx, d, node, plan, "chunk index lists chunks outside the dataset extent")
    with ctx.checking():
        disagree = lookups_disagree(ctx, d, table, chunks)
    if disagree:
        return inline_decoded(ctx, d, node, plan, "the chunk index finds other chunks by position than it "
                              "lists (damaged chunk index?)")
    with ctx.checking():
        odd_edges = unfiltered_edge_chunks(d, node, table, chunk_nbytes, nd)
    masks = masks | odd_edges.astype(np.uint32)
    odd = masks != 0
    with ctx.checking():
        why = damaged_szip_chunk(ctx, node, table, odd, chunk_nbytes)
    if why:
        raise ctx.fail(node.path, why, RefindexError)
    small = table.sizes < np.uint64(ctx.opts.inline_threshold)
    with ctx.reading("data", node.path):
        why = keep_odd_chunks(ctx, d, node, table, odd, nd, chunk_nbytes)
    if why:
        return inline_decoded(ctx, d, node, plan, why)
    with ctx.reading("data", node.path):
        agrees = inline_tiny(ctx, d, node, table, np.nonzero(small & ~odd)[0], nd)
    node.refs = table.take(~(odd | small))
    if agrees and ctx.want_sample_check() and len(node.refs):
        with ctx.checking():
            agrees = sample_agrees(ctx, d, node, nd)
    if not agrees:
        node.inline.clear()
        node.refs = None
        return inline_decoded(ctx, d, node, plan, "a stored chunk decodes to other values than "
                              "libhdf5 reads (damaged chunk index?)")
    return node


def inline_tiny(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, table: ChunkTable, tiny: np.ndarray,
                nd: np.dtype) -> bool:
    """Copy the chunks at rows ``tiny`` in; False when a sample of them decodes to other values than libhdf5's."""
    if len(tiny) <= BULK_INLINE:
        # libhdf5 looks each chunk up by its position: the bytes its own reads use.
        for i in tiny:
            coord = table.coords[i]
            node.inline[chunk_key(coord)] = bytes(d.id.read_direct_chunk(chunk_origin(coord, node.chunks,
                                                                                      len(d.shape)))[1])
        return True
    # many tiny chunks: a few merged reads instead of a libhdf5 call each
    datas = ctx.read_many(None if table.url in (None, ctx.url) else table.url,
                          table.offsets[tiny].tolist(), table.sizes[tiny].tolist())
    for coord, raw in zip(table.coords[tiny].tolist(), datas):
        node.inline[chunk_key(coord)] = raw
    if ctx.want_sample_check():
        with ctx.checking():
            return all(chunk_agrees(d, node, nd, table.coords[tiny[i]], datas[i])
                       for i in sorted({0, len(tiny) // 2, len(tiny) - 1}))
    return True


def sample_agrees(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, nd: np.dtype) -> bool:
    """Do the first, middle and last referenced chunks decode to libhdf5's values?"""
    n = len(node.refs)
    for i in sorted({0, n // 2, n - 1}):
        raw = ctx.read_file(None, int(node.refs.offsets[i]), int(node.refs.sizes[i]))
        if not chunk_agrees(d, node, nd, node.refs.coords[i], raw):
            return False
    return True


def keep_odd_chunks(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, table: ChunkTable, odd: np.ndarray,
                    nd: np.dtype, chunk_nbytes: int) -> str:
    """Store the chunks written with filters skipped inline, re-encoded with the array's pipeline,
    and settle the LZF decoder: stock while every chunk is within its 8x, else refindex's.

    Returns why the array's values must be copied in instead ("" when they need not).
    """
    lzf_ok = lzf_within_stock_ratio(node.compressor, table.sizes[~odd], chunk_nbytes)
    encoded: dict[str, bytes] = {}
    if odd.any():
        try:
            encoded = reencode_odd(d, node, table.coords[odd], nd)
        except NotImplementedError:  # a decode-only codec (bitshuffle)
            return "chunks written with filters skipped, and the pipeline cannot re-encode them"
        lzf_ok = lzf_ok and lzf_within_stock_ratio(node.compressor, [len(b) for b in encoded.values()],
                                                   chunk_nbytes)
    if not lzf_ok:  # chunks squeezed beyond the stock LZF decoder's 8x: refindex's codec reads them
        if ctx.opts.portable:
            return "LZF chunks compressed more than 8x, which only refindex's own codec decodes"
        node.compressor = refindex_lzf(chunk_nbytes)
        encoded = reencode_odd(d, node, table.coords[odd], nd) if odd.any() else {}
    node.inline.update(encoded)
    return ""


def reencode_odd(d: h5py.Dataset, node: ArrayNode, coords: np.ndarray, nd: np.dtype) -> dict[str, bytes]:
    """Chunks libhdf5 stored with filters skipped, as libhdf5 reads them, encoded with the array's pipeline."""
    return {chunk_key(c): reencode_chunk(d, node, c, nd) for c in coords}


def reencode_chunk(d: h5py.Dataset, node: ArrayNode, coord: Any, nd: np.dtype) -> bytes:
    """One chunk as libhdf5 reads it, encoded with the array's full pipeline."""
    ndim = len(d.shape)
    sel = tuple(slice(int(c) * s, min((int(c) + 1) * s, n)) for c, s, n in zip(coord[:ndim], node.chunks, d.shape))
    data = values_of(d)[sel]
    full = np.full(node.chunks, fill_value_of(d, nd), dtype=nd) if nd.names is None else np.zeros(node.chunks, nd)
    full[tuple(slice(0, s.stop - s.start) for s in sel)] = data
    return encode_chunk(full, node.filters, node.compressor)
