"""Which reader lists a chunked dataset's chunks: the native index readers, else libhdf5.

The native readers (:mod:`refindex.scanner.chunkindex`) read the index nodes a level at a
time through the source layer; whatever they do not read exactly as libhdf5 writes it, they
refuse, and ``chunk_iter`` lists that dataset instead: the scan's stats record which datasets
and why.  Both give the same :class:`~refindex.model.ChunkTable`.

``REFINDEX_CHECK_CHUNK_INDEX=1`` (the test suite sets it) compares every native listing with
libhdf5's and fails the scan on any difference.
"""

from __future__ import annotations

import os
import time
from typing import Any

import h5py
import numpy as np

from ..errors import IndexMismatch, RefindexError
from ..model import ChunkTable
from ._chunkiter import chunk_table
from ._context import ScanContext
from .chunkindex import DatasetFacts, FileFacts, Listing, Unparsed, dataset_layout, file_facts, read_chunk_index

CHECK_ENV = "REFINDEX_CHECK_CHUNK_INDEX"
CHECK_MAX_CHUNKS = 250_000  # larger listings are not compared in check mode (it would double a test's time)


def listed_chunks(ctx: ScanContext, d: h5py.Dataset, ndim: int, chunks: Any, extra: Any,
                  dcpl: Any) -> tuple[ChunkTable, np.ndarray, str]:
    """(table, filter masks, why libhdf5's listing cannot be trusted or "") of ``d``'s stored chunks,
    natively where possible."""
    stats = ctx.index_stats
    if ctx.opts.native_index:
        t0 = time.perf_counter()
        try:
            listing, index, reader = native_listing(ctx, d, dcpl)
        except Unparsed as e:
            stats.fell_back(d.name, e.index, e.reason)
        except (RefindexError, MemoryError):  # the source's own errors (a read that failed) are the scan's
            raise
        except Exception as e:  # a native reader's own failure: libhdf5 lists this one (a bug; tests raise it)
            if os.environ.get(CHECK_ENV):
                raise
            stats.fell_back(d.name, "unknown", f"native reader failed: {type(e).__name__}: {e}")
        else:
            stats.native[index] += 1
            stats.chunks += len(listing)
            stats.rounds += reader.rounds
            stats.nbytes += reader.nbytes
            stats.seconds += time.perf_counter() - t0
            coords = listing.coords
            if extra:  # trailing dimensions of string-as-array types: always chunk 0
                coords = np.concatenate([coords, np.zeros((len(coords), len(extra)), np.int64)], axis=1)
            table = ChunkTable(coords, listing.offsets, listing.sizes, None)
            if os.environ.get(CHECK_ENV) and len(listing) <= CHECK_MAX_CHUNKS:
                with ctx.checking():  # libhdf5's reads for the comparison stay out of the index's pages
                    check_listing(ctx, d, ndim, chunks, extra, index, table, listing.masks)
            return table, listing.masks, ""
    else:
        stats.libhdf5 += 1
    table, masks = chunk_table(d, ndim, chunks, extra, progress=ctx.progress)
    return table, masks, misnumbered(ctx, d, dcpl)


def misnumbered(ctx: ScanContext, d: h5py.Dataset, dcpl: Any) -> str:
    """Why ``chunk_iter``'s positions are wrong for ``d``, or "".

    libhdf5 (2.0) numbers the chunks of an extensible array whose unlimited dimension is not the
    first without the reordering its reads use: listed positions differ from where reads look.
    """
    unlimited = [i for i, m in enumerate(d.maxshape) if m is None]
    if len(unlimited) != 1 or unlimited[0] == 0:
        return ""
    try:
        ds = DatasetFacts(d.name, int(h5py.h5g.get_objinfo(d.id).objno[0]), tuple(d.shape), tuple(d.maxshape),
                          tuple(int(c) for c in dcpl.get_chunk()), None, dcpl.get_nfilters() > 0)
        if dataset_layout(lambda o, n: ctx.read_many(None, o, n), index_facts(ctx), ds).index != "earray":
            return ""
    except Unparsed:
        pass  # unknown: not trusted
    return ("libhdf5 lists the chunks of an extensible array whose unlimited dimension is not the first at other "
            "positions than its reads use")


def native_listing(ctx: ScanContext, d: h5py.Dataset, dcpl: Any) -> tuple[Listing, str, Any]:
    """(listing, index type, reader) from the native readers; :class:`Unparsed` when they do not read it."""
    facts = index_facts(ctx)
    ds = dataset_facts(d, dcpl)

    def fetch(offsets: list[int], sizes: list[int]) -> list[bytes]:
        return ctx.read_many(None, offsets, sizes)

    listing, layout, reader = read_chunk_index(fetch, facts, ds, ctx.progress.chunks)
    return listing, layout.index, reader


def dataset_facts(d: h5py.Dataset, dcpl: Any) -> DatasetFacts:
    """What libhdf5 reports of chunked ``d`` (``dcpl``: its creation property list), for a native reader."""
    return DatasetFacts(
        path=d.name,
        header=int(h5py.h5g.get_objinfo(d.id).objno[0]),
        shape=tuple(int(s) for s in d.shape),
        maxshape=tuple(None if m is None else int(m) for m in d.maxshape),
        chunks=tuple(int(c) for c in dcpl.get_chunk()),
        # h5py reports variable-length types by their size in memory: the layout message has the stored one
        itemsize=None if d.dtype.hasobject else int(d.id.get_type().get_size()),
        filtered=dcpl.get_nfilters() > 0,
    )


def index_facts(ctx: ScanContext) -> FileFacts:
    """The scanned file's facts (sizes, base address, B-tree K), read once per scan."""
    if ctx.index_facts is None:
        fcpl = ctx.f.id.get_create_plist()
        try:
            with ctx.reading("meta"):  # read once, by whichever index walk comes first (a split walk: one per process)
                ctx.index_facts = file_facts(lambda o, n: ctx.read_many(None, o, n), fcpl.get_sizes(),
                                             int(fcpl.get_userblock()), int(ctx.file_size))
        except Unparsed as e:
            ctx.index_facts = e
    if isinstance(ctx.index_facts, Unparsed):
        raise ctx.index_facts
    return ctx.index_facts


def check_listing(ctx: ScanContext, d: h5py.Dataset, ndim: int, chunks: Any, extra: Any, index: str,
                  table: ChunkTable, masks: np.ndarray) -> None:
    """Check mode: the native table must be libhdf5's (its read path where its ``chunk_iter`` misnumbers)."""
    if index == "earray" and d.maxshape[0] is not None:
        why = read_path_disagrees(ctx, d, table, masks)
    else:
        try:
            want, want_masks = chunk_table(d, ndim, chunks, extra)
        except Exception as e:  # noqa: BLE001 - libhdf5 refuses what the native reader read
            raise IndexMismatch(f"the native {index} reader listed {len(table)} chunks where libhdf5's chunk_iter "
                                f"fails ({type(e).__name__}: {e})", file=ctx.label, path=d.name) from e
        same = (np.array_equal(want.coords, table.coords) and np.array_equal(want.offsets, table.offsets)
                and np.array_equal(want.sizes, table.sizes) and np.array_equal(want_masks, masks))
        why = "" if same else f"{len(table)} chunks natively, {len(want)} from chunk_iter, not the same"
    if why:
        raise IndexMismatch(f"the native {index} reader disagrees with libhdf5: {why}", file=ctx.label, path=d.name)


def read_path_disagrees(ctx: ScanContext, d: h5py.Dataset, table: ChunkTable, masks: np.ndarray) -> str:
    """Extensible arrays whose unlimited dimension is not the first: libhdf5's ``chunk_iter`` numbers
    their chunks without the swizzle its reads use, so each listed chunk inside the extent is looked up
    through the read path (``read_direct_chunk``) instead, and every chunk there must be listed."""
    rank = len(d.shape)
    chunks = d.chunks
    grid = [-(-int(n) // c) for n, c in zip(d.shape, chunks)]
    listed = {tuple(int(x) for x in c[:rank]): i for i, c in enumerate(table.coords.tolist())}
    for pos in np.ndindex(*grid):
        origin = tuple(p * c for p, c in zip(pos, chunks))
        try:
            mask, raw = d.id.read_direct_chunk(origin)
        except Exception:  # noqa: BLE001 - "chunk storage is not allocated"
            if pos in listed:
                return f"chunk {pos} listed, libhdf5 reads none there"
            continue
        i = listed.get(pos)
        if i is None:
            return f"libhdf5 reads chunk {pos}, not listed"
        got = ctx.read_file(None, int(table.offsets[i]), int(table.sizes[i]))
        if bytes(raw) != got or int(mask) != int(masks[i]):
            return f"chunk {pos} differs from libhdf5's read"
    return ""
