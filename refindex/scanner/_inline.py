"""Values that go into the index itself: data behind filters no codec runs, variable-length
data, references, and small chunks (read together once the walk is done)."""

from __future__ import annotations

import h5py
import numpy as np

from ..codecs import DTypePlan, clear_long_padding, descr, encode_chunk, fill_value_json, packed_dtype
from ..checks.compare import values_of
from ..model import ArrayNode, chunk_key
from ._context import ScanContext, fill_value_of

MiB = 1 << 20
INLINE_CHUNK_BYTES = 4 * MiB  # inline values are cut into row chunks of about this size


def check_inline_size(ctx: ScanContext, node: ArrayNode, nbytes: int, why: str) -> None:
    if nbytes > ctx.opts.inline_max:
        raise ctx.fail(
            node.path,
            f"{why}; its {nbytes} bytes exceed the inline limit of {ctx.opts.inline_max} "
            "(raise inline_max / --inline-max to index it inline)",
        )


def read_all(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, why: str | None = None) -> np.ndarray:
    try:
        with ctx.reading("data", node.path):
            return np.asarray(values_of(d)[...])
    except Exception as e:
        prefix = f"{why}, and " if why else ""
        raise ctx.fail(node.path, f"{prefix}h5py cannot read the values either: {e}") from e


def inline_decoded(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, plan: DTypePlan, why: str,
                   note: bool = True) -> ArrayNode:
    """Values read by h5py (decoded) stored inline, zlib-compressed; ``note``: say ``why`` in the
    array's ``refindex_inlined`` attribute."""
    if not plan.raw:
        return inline_converted(ctx, d, node, plan, why)
    nd = plan.numpy_dtype if plan.numpy_dtype is not None else d.dtype
    check_inline_size(ctx, node, int(np.prod(node.shape, dtype=np.int64)) * nd.itemsize, why)
    data = read_all(ctx, d, node, why)
    nd = packed_dtype(nd)
    data = clear_long_padding(np.ascontiguousarray(data, dtype=nd).reshape(node.shape))
    node.dtype = descr(nd)
    node.fill_value = fill_value_json(fill_value_of(d, nd), nd)
    node.filters, node.compressor = None, {"id": "zlib", "level": 1}
    if note:
        node.attrs["refindex_inlined"] = why
    store_inline(node, data)
    return node


def inline_converted(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, plan: DTypePlan,
                     why: str | None = None) -> ArrayNode:
    """Values h5py reads, converted by the dtype plan (vlen data, references), stored inline."""
    data = read_all(ctx, d, node, why)
    conv = plan.convert(data)
    if plan.object_codec is not None:
        est = sum(len(v) if isinstance(v, (str, bytes)) else getattr(v, "nbytes", 8) for v in conv.reshape(-1))
    else:
        est = conv.nbytes
    check_inline_size(ctx, node, est, why or "variable-length values must be stored inline")
    if plan.object_codec is not None:
        node.dtype = "|O"
        node.filters = [dict(plan.object_codec)]
        node.fill_value = None
    else:
        node.dtype = descr(conv.dtype)
        node.fill_value = fill_value_json(np.zeros((), conv.dtype)[()], conv.dtype)
        node.filters = None
    node.compressor = {"id": "zlib", "level": 1}
    if why:
        node.attrs["refindex_inlined"] = why
    store_inline(node, conv.reshape(node.shape))
    return node


def store_inline(node: ArrayNode, data: np.ndarray, target: int = INLINE_CHUNK_BYTES) -> None:
    """Split ``data`` into row chunks of about ``target`` bytes, encode and keep them."""
    shape = node.shape
    if not shape:
        node.chunks = ()
        node.inline["0"] = encode_chunk(data.reshape(()), node.filters, node.compressor)
        return
    if data.size == 0:
        node.chunks = tuple(max(1, s) for s in shape)
        return
    row = max(1, data[0:1].nbytes if data.dtype != object else 64 * int(np.prod(shape[1:], dtype=np.int64)))
    rows = max(1, min(shape[0], target // row))
    node.chunks = (rows,) + tuple(max(1, s) for s in shape[1:])
    rest = (0,) * (len(shape) - 1)
    for i, start in enumerate(range(0, shape[0], rows)):
        block = data[start : start + rows]
        if block.shape[0] < rows:  # zarr chunks are full size; pad the edge chunk
            block = np.concatenate([block, _padding(node, block, rows - block.shape[0])])
        node.inline[chunk_key((i,) + rest)] = encode_chunk(block, node.filters, node.compressor)


def _padding(node: ArrayNode, block: np.ndarray, n: int) -> np.ndarray:
    """``n`` rows of empty values to fill an edge chunk (empty strings for vlen data)."""
    pad = np.empty((n,) + block.shape[1:], dtype=block.dtype)
    first = (node.filters or [{}])[0].get("id")
    if block.dtype != object:
        pad[...] = np.zeros((), block.dtype)
    elif first == "vlen-array":
        for j in np.ndindex(pad.shape):
            pad[j] = np.zeros(0, dtype=node.filters[0]["dtype"])
    else:
        pad[...] = "" if first == "vlen-utf8" else (b"" if first == "vlen-bytes" else np.zeros(0, dtype=block.dtype))
    return pad


def defer_small(ctx: ScanContext, node: ArrayNode) -> None:
    """Mark the referenced chunks that go into the index instead: each one below
    ``inline_threshold``, or all of them when the dataset's stored bytes are below
    ``inline_dataset_threshold``.  Their bytes are read after the walk, all together."""
    t = node.refs
    if t is None or not len(t):
        return
    stored = int(t.sizes.sum()) + sum(len(b) for b in node.inline.values())
    if stored < ctx.opts.inline_dataset_threshold:
        small = np.ones(len(t), dtype=bool)
    else:
        small = t.sizes < np.uint64(ctx.opts.inline_threshold)
        if not small.any():
            return
    ctx.deferred.append((node, t.take(small)))
    rest = t.take(~small)
    node.refs = rest if len(rest) else None


def read_deferred(ctx: ScanContext) -> None:
    """Copy the chunks :func:`defer_small` chose into the index: one batched read per file."""
    wanted: dict[str | None, list[tuple[ArrayNode, str, int, int]]] = {}
    for node, t in ctx.deferred:
        urls, which = t.row_urls()
        for coord, j, off, size in zip(t.coords.tolist(), which.tolist(), t.offsets.tolist(), t.sizes.tolist()):
            url = urls[j]
            wanted.setdefault(None if url in (None, ctx.url) else url, []).append((node, chunk_key(coord), off, size))
    for url, items in wanted.items():
        with ctx.reading("data"):  # small values, each below inline_dataset_threshold: all in the pages
            datas = ctx.read_many(url, [o for _, _, o, _ in items], [n for _, _, _, n in items])
        for (node, key, off, size), data in zip(items, datas):
            node.inline[key] = data
            if url is None:
                ctx.copied.append((off, data))  # for the fingerprint
                ctx.tree.copied.append((off, size, node.path, key))  # for the pages' holes
    ctx.deferred.clear()
