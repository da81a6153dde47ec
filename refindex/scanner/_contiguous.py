"""Contiguous storage: one run of bytes, in the scanned file or in external raw storage files.

Large runs are cut into virtual C-order chunks (``contiguous_chunk_bytes``) so partial
reads stay small; a last chunk running past the end of its file is stored inline, padded.
"""

from __future__ import annotations

import h5py
import numpy as np

from .. import urls
from ..codecs import DTypePlan, fill_value_json, string_padding
from ..errors import RefindexError
from ..model import ArrayNode, ChunkTable, chunk_key
from ..checks.safety import resolve_inside
from ._checks import contiguous_agrees
from ._context import ScanContext, fill_value_of
from ._inline import check_inline_size, inline_decoded, store_inline


def contiguous(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, nd: np.dtype) -> ArrayNode:
    dsid = d.id
    # Unwritten storage: get_offset() is None, or userblock-1 when there is a user block.
    offset = dsid.get_offset() if dsid.get_storage_size() else None
    itemsize = nd.itemsize
    shape = node.shape
    nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
    node.chunks = tuple(max(1, s) for s in shape)
    if offset is None or nbytes == 0:
        return node  # never written: every element is the fill value
    stored = dsid.get_storage_size()
    if stored < nbytes:
        raise ctx.fail(node.path, f"contiguous storage holds {stored} bytes, expected {nbytes}")
    split_contiguous(ctx, node, ctx.url, int(offset), nbytes, itemsize, None)
    if ctx.want_sample_check() and not _agrees(ctx, d, node, nd, int(offset)):
        node.refs = None
        node.inline.clear()
        return inline_decoded(ctx, d, node, DTypePlan(node.dtype, True, node.kind, numpy_dtype=nd),
                              "stored bytes differ from what libhdf5 reads (damaged layout message?)")
    return node


def _agrees(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, nd: np.dtype, offset: int) -> bool:
    with ctx.checking():
        return contiguous_agrees(ctx, d, node, nd, offset)


def split_contiguous(ctx: ScanContext, node: ArrayNode, url: str | None, offset: int, nbytes: int, itemsize: int,
                     file_size: int | None) -> None:
    """Reference contiguous bytes, as virtual C-order chunks when they are large."""
    shape = node.shape
    target = ctx.opts.contiguous_chunk_bytes or 0
    chunks = list(max(1, s) for s in shape)
    if target and nbytes > target and shape:
        inner = itemsize
        axis = len(shape) - 1
        for axis in range(len(shape) - 1, -1, -1):
            if inner * shape[axis] > target:
                break
            inner *= shape[axis]
        chunks = [1] * axis + [max(1, target // inner)] + list(shape[axis + 1 :])
        chunks[axis] = min(chunks[axis], shape[axis])
    node.chunks = tuple(chunks)
    grid = [-(-s // c) for s, c in zip(shape, chunks)] or []
    strides = [int(np.prod(shape[i + 1 :], dtype=np.int64)) for i in range(len(shape))]
    chunk_bytes = int(np.prod(chunks, dtype=np.int64)) * itemsize
    if shape:
        idx = np.indices(grid).reshape(len(shape), -1).T.astype(np.int64)
        elem = (idx * np.asarray(chunks, np.int64) * np.asarray(strides, np.int64)).sum(axis=1)
    else:
        idx = np.zeros((1, 0), np.int64)
        elem = np.zeros(1, np.int64)
    offsets = (offset + elem * itemsize).astype(np.uint64)
    sizes = np.full(len(offsets), chunk_bytes, dtype=np.uint64)
    end = offset + nbytes
    limit = file_size if file_size is not None else ctx.file_size
    over = offsets + sizes > np.uint64(limit)
    table = ChunkTable(idx, offsets, sizes, url)
    if over.any():
        # The last chunk runs past the end of the file: store it inline, padded.
        for i in np.nonzero(over)[0]:
            start = int(offsets[i])
            raw = ctx.read_file(url, start, min(end, limit) - start)
            node.inline[chunk_key(idx[i])] = raw + b"\0" * (chunk_bytes - len(raw))
        table = table.take(~over)
    node.refs = table


# ---------------------------------------------------------------------- external raw storage
def external_storage(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, plan: DTypePlan, dcpl) -> ArrayNode:
    """Contiguous data kept in other files (H5Pset_external), found beside the scanned file."""
    if not plan.raw:
        raise ctx.fail(node.path, "external storage of non-fixed-size data")
    nd = plan.numpy_dtype if plan.numpy_dtype is not None else d.dtype
    node.fill_value = fill_value_json(fill_value_of(d, nd), nd)
    nbytes = int(np.prod(node.shape, dtype=np.int64)) * nd.itemsize
    segments = [(seg_name.decode("utf-8") if isinstance(seg_name, bytes) else seg_name, seg_offset, seg_size)
                for seg_name, seg_offset, seg_size in map(dcpl.get_external, range(dcpl.get_external_count()))]
    name, offset, size = segments[0]
    for seg_name, _, _ in segments:  # refuse before touching any of them
        resolve_inside(seg_name, ctx.url, allowed_root=ctx.opts.allowed_root, allow_outside=ctx.opts.allow_outside,
                       what="external raw storage file", file=ctx.label, path=node.path)
    if len(segments) == 1 or size >= nbytes:
        url = urls.beside(ctx.url, name)
        file_size = external_size(ctx, url, node)
        if file_size - offset < nbytes:
            return inline_decoded(ctx, d, node, plan, "external raw storage file is shorter than the data")
        split_contiguous(ctx, node, url, int(offset), nbytes, nd.itemsize, file_size)
        node.attrs["refindex_external_storage"] = name
        strpad = string_padding(d.id.get_type())
        if strpad:
            node.filters = [strpad]
        return node
    return external_segments(ctx, d, node, nd, segments, nbytes)


def external_segments(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, nd: np.dtype, segments: list,
                      nbytes: int) -> ArrayNode:
    """Contiguous data spread over several external files, read here and stored inline.

    Not through libhdf5: it looks for external files in the working directory (for a
    remote file there is no other place), so it could read an unrelated file of the same
    name.  The files beside the scanned one are read like the single-file case references
    them; as libhdf5 does, bytes past the end of a file read as zeros.  ``segments`` holds
    (decoded name, offset, size) triples.
    """
    check_inline_size(ctx, node, nbytes, "external raw storage spread over several files is stored inline")
    parts: list[bytes] = []
    need = nbytes
    for seg_name, seg_offset, seg_size in segments:
        if need <= 0:
            break
        url = urls.beside(ctx.url, seg_name)
        take = min(need, int(seg_size))  # the last segment may be H5F_UNLIMITED
        avail = max(0, min(take, external_size(ctx, url, node) - int(seg_offset)))
        data = ctx.read_file(url, int(seg_offset), avail) if avail else b""
        if len(data) != avail:
            raise ctx.fail(node.path, f"short read of external raw storage file {url}", RefindexError)
        parts.append(data + bytes(take - avail))
        need -= take
    if need > 0:
        raise ctx.fail(node.path, "external raw storage segments hold fewer bytes than the dataset", RefindexError)
    values = np.frombuffer(b"".join(parts), dtype=nd).reshape(node.shape)
    strpad = string_padding(d.id.get_type())
    node.filters, node.compressor = ([strpad] if strpad else None), {"id": "zlib", "level": 1}
    node.attrs["refindex_inlined"] = "external raw storage spread over several files"
    node.attrs["refindex_external_storage"] = [seg_name for seg_name, _, _ in segments]
    store_inline(node, values)
    return node


def external_size(ctx: ScanContext, url: str, node: ArrayNode) -> int:
    try:
        fs, p = ctx.fs_for(url)
        return int(fs.size(p))
    except FileNotFoundError as e:
        raise ctx.fail(node.path, f"external raw storage file {url} is missing", RefindexError) from e
