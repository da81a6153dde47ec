"""Virtual datasets indexed by reference into their source files.

A virtual dataset (VDS) has no storage of its own: libhdf5 gathers its values from
regions of other datasets.  When every mapping places one whole source dataset at a
chunk-aligned position, and all sources share dtype, chunk shape and filters, the
sources' chunks *are* chunks of the virtual dataset: each is referenced in its own
file with its grid position shifted by the mapping's origin.  Anything else (partial
or strided selections, unlimited or printf-named mappings, unaligned origins, mixed
pipelines) returns a reason instead, and the scanner stores the values inline.

The sources' chunk tables are built by the scanner's own chunked/contiguous layout
functions, with a context for the source file, so every special case there (skipped
filters, tiny chunks, string padding) applies unchanged.
"""

from __future__ import annotations

import dataclasses
import os
from contextlib import ExitStack

import h5py
import numpy as np

from .. import urls
from ..codecs import DTypePlan, fill_value_json, plan_dtype, string_padding
from ..errors import RefindexError
from ..model import ArrayNode, ChunkTable
from ..checks.safety import resolve_inside
from ..source import BlockCache
from ._attrs import ref_json
from ._checks import chunk_agrees
from ._chunked import chunked
from ._context import ScanContext, fill_value_of
from ._contiguous import contiguous, external_size

MAX_MAPPINGS_PAIRWISE = 4096  # overlap test is pairwise; beyond this the values are inlined


class NotPossible(Exception):
    """Why this virtual dataset cannot be indexed by reference (the values go inline)."""


@dataclasses.dataclass
class _Mapping:
    origin: tuple[int, ...]  # where the block starts in the virtual dataset
    block: tuple[int, ...]  # block shape in the virtual dataset
    file_name: str
    dset_name: str
    src_shape: tuple[int, ...] | None  # None: the whole source, whatever its extent


def _block_of(space) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(start, shape) of a selection that is all of ``space`` or one hyperslab block; else None."""
    kind = space.get_select_type()
    shape = tuple(int(s) for s in space.shape)
    if kind == h5py.h5s.SEL_ALL:
        return (0,) * len(shape), shape
    if kind != h5py.h5s.SEL_HYPERSLABS:
        return None
    if space.is_regular_hyperslab():
        _start, _stride, count, block = space.get_regular_hyperslab()
        if any(int(x) == h5py.h5s.UNLIMITED for x in tuple(count) + tuple(block)):
            return None  # unlimited mapping: its extent follows the source's
    if space.get_select_hyper_nblocks() != 1:
        return None
    lo, hi = np.asarray(space.get_select_hyper_blocklist()[0], dtype=np.int64)
    return tuple(int(x) for x in lo), tuple(int(b - a + 1) for a, b in zip(lo, hi))


def mappings_of(d: h5py.Dataset) -> list[_Mapping]:
    """The mappings of ``d``, each a whole source dataset placed as one block; or NotPossible."""
    try:
        maps = d.virtual_sources()
    except Exception as e:
        raise NotPossible(f"mappings unreadable ({e})") from e
    out = []
    for m in maps:
        if "%" in m.file_name or "%" in m.dset_name:
            raise NotPossible("printf-style source names")
        try:
            vblock = _block_of(m.vspace)
            sblock = _block_of(m.src_space)
        except Exception as e:  # e.g. unlimited selections h5py cannot list
            raise NotPossible(f"selection not a single block ({e})") from e
        if vblock is None or sblock is None:
            raise NotPossible("a mapping is not one regular block")
        src_shape: tuple[int, ...] | None = None  # "all of it": the extent is the source's own
        if m.src_space.get_select_type() != h5py.h5s.SEL_ALL:
            src_shape = tuple(int(s) for s in m.src_space.shape)
            if sblock != ((0,) * len(src_shape), src_shape):
                raise NotPossible("a mapping selects part of its source dataset")
            _check_block(vblock[1], src_shape)
        out.append(_Mapping(vblock[0], vblock[1], m.file_name, m.dset_name, src_shape))
    if not out:
        raise NotPossible("no mappings")
    return out


def _check_block(block: tuple[int, ...], src_shape: tuple[int, ...]) -> None:
    """The block must be the source's shape, with leading unit axes when the VDS has more axes."""
    k = len(block) - len(src_shape)
    if k < 0 or any(b != 1 for b in block[:k]) or block[k:] != src_shape:
        raise NotPossible("a mapping's block shape differs from its source's shape")


def _check_disjoint(maps: list[_Mapping], shape: tuple[int, ...]) -> None:
    if len(maps) > MAX_MAPPINGS_PAIRWISE:
        raise NotPossible(f"more than {MAX_MAPPINGS_PAIRWISE} mappings")
    lo = np.asarray([m.origin for m in maps], dtype=np.int64).reshape(len(maps), -1)
    hi = lo + np.asarray([m.block for m in maps], dtype=np.int64).reshape(len(maps), -1)
    if (hi > np.asarray(shape, dtype=np.int64)).any():
        raise NotPossible("a mapping reaches beyond the dataset's extent")
    for i in range(len(maps) - 1):
        overlap = ((lo[i] < hi[i + 1 :]) & (lo[i + 1 :] < hi[i])).all(axis=1)
        if overlap.any():
            raise NotPossible("mappings overlap")


def _source_url(ctx: ScanContext, name: str, path: str) -> str:
    """The source file's URL; outside the allowed root this raises, as external raw storage does."""
    if name == ".":
        return ctx.url
    return resolve_inside(name, ctx.url, allowed_root=ctx.opts.allowed_root, allow_outside=ctx.opts.allow_outside,
                          what="virtual dataset source file", file=ctx.label, path=path)


def _open(ctx: ScanContext, url: str, stack: ExitStack) -> h5py.File:
    if not urls.is_local(url):
        fs, path = ctx.fs_for(url)  # the scan's storage options for objects beside the scanned one
        fh = stack.enter_context(BlockCache(fs, path, fs.size(path)))  # retries; no collection while libhdf5 waits
        return stack.enter_context(h5py.File(fh, "r"))
    return stack.enter_context(h5py.File(url.removeprefix("file://"), "r"))


def _fill_bytes(d: h5py.Dataset, nd: np.dtype) -> bytes:
    return np.asarray(fill_value_of(d, nd), dtype=nd).tobytes()


def _source_node(ctx: ScanContext, d: h5py.Dataset, src: h5py.Dataset, url: str, node: ArrayNode,
                 nd: np.dtype) -> ArrayNode:
    """The source's chunks as the scanner indexes a dataset of its own file."""
    if src.is_virtual:
        raise NotPossible("a source is itself virtual")
    dcpl = src.id.get_create_plist()
    if dcpl.get_external_count() > 0:
        raise NotPossible("a source uses external raw storage")
    if src.dtype != nd or not src.id.get_type().equal(d.id.get_type()):
        raise NotPossible("a source's datatype differs from the virtual dataset's")
    plan = plan_dtype(src.dtype, lambda r: ref_json(ctx, r))
    if not plan.raw or plan.extra_shape:
        raise NotPossible("source values are not plain fixed-size data")
    size = ctx.file_size if url == ctx.url else external_size(ctx, url, node)
    sub = ctx.for_file(src.file, url, size)  # checked below against the virtual dataset's own values
    shape = tuple(int(s) for s in src.shape)
    tmp = ArrayNode(node.path, shape, shape, node.dtype, None, kind=node.kind)
    layout = dcpl.get_layout()
    strpad = string_padding(src.id.get_type())
    try:
        if layout == h5py.h5d.CHUNKED:
            tmp = chunked(sub, src, tmp, plan, nd, dcpl, strpad)
        elif layout == h5py.h5d.CONTIGUOUS:
            tmp = contiguous(sub, src, tmp, nd)
            if strpad:
                tmp.filters = [strpad]
        else:
            raise NotPossible("a source is stored compact")
    except RefindexError as e:
        raise NotPossible(f"a source cannot be indexed ({e.reason})") from e
    if "refindex_inlined" in tmp.attrs:
        raise NotPossible(f"a source's values must be inlined ({tmp.attrs['refindex_inlined']})")
    if tmp.refs is not None:
        tmp.refs.url = url
    return tmp


def _stored_count(tmp: ArrayNode) -> int:
    return (len(tmp.refs) if tmp.refs is not None else 0) + len(tmp.inline)


def _shift(coords: np.ndarray, k: int, base: np.ndarray) -> np.ndarray:
    """Source grid coordinates -> virtual grid coordinates (``k`` leading unit axes, plus ``base``)."""
    lead = np.zeros((coords.shape[0], k), dtype=np.int64)
    return np.concatenate([lead, coords.astype(np.int64)], axis=1) + base


def index_virtual(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, plan: DTypePlan) -> ArrayNode:
    """Fill ``node`` with references into the source files of ``d``; NotPossible says why not."""
    if not plan.raw or plan.extra_shape:
        raise NotPossible("not plain fixed-size data")
    nd = plan.numpy_dtype if plan.numpy_dtype is not None else d.dtype
    shape = tuple(int(s) for s in d.shape)
    maps = mappings_of(d)
    _check_disjoint(maps, shape)
    urls = [_source_url(ctx, m.file_name, node.path) for m in maps]  # refuse before opening any
    vfill = _fill_bytes(d, nd)
    tables: list[ChunkTable] = []
    inline: dict[str, bytes] = {}
    chunks = pipeline = None
    samples: list[tuple[str, np.ndarray, int, int]] = []
    with ExitStack() as stack:
        files: dict[str, h5py.File] = {}
        for m, url in zip(maps, urls):
            if url == ctx.url:
                f = ctx.f
            elif url in files:
                f = files[url]
            else:
                try:
                    f = files[url] = _open(ctx, url, stack)
                except Exception as e:  # missing, unreadable or not HDF5: libhdf5 reads fill values there
                    raise NotPossible(f"source file {url} cannot be opened ({e})") from e
            src = f.get(m.dset_name)
            if not isinstance(src, h5py.Dataset) or src.shape is None:
                raise NotPossible(f"source {m.dset_name!r} in {url} is missing or empty")
            if m.src_shape is None:
                m.src_shape = tuple(int(s) for s in src.shape)
                _check_block(m.block, m.src_shape)
            elif tuple(int(s) for s in src.shape) != m.src_shape:
                raise NotPossible(f"source {m.dset_name!r} in {url} has another shape than its mapping")
            tmp = _source_node(ctx, d, src, url, node, nd)
            if chunks is None:
                chunks, pipeline = tmp.chunks, (tmp.filters, tmp.compressor)
            elif tmp.chunks != chunks or (tmp.filters, tmp.compressor) != pipeline:
                raise NotPossible("sources differ in chunk shape or filters")
            k = len(shape) - len(m.src_shape)
            vchunks = (1,) * k + tuple(chunks)
            if any(o % c for o, c in zip(m.origin, vchunks)):
                raise NotPossible("a mapping's origin is not a multiple of the chunk shape")
            for ax in range(k, len(shape)):
                c = vchunks[ax]
                if m.block[ax] % c and m.origin[ax] + m.block[ax] != shape[ax]:
                    raise NotPossible("a source's edge chunks would overlap a neighbouring region")
            grid = int(np.prod([-(-s // c) for s, c in zip(m.src_shape, chunks)], dtype=np.int64))
            if _stored_count(tmp) < grid and _fill_bytes(src, nd) != vfill:
                raise NotPossible("a source has unwritten chunks and another fill value")
            base = np.asarray([o // c for o, c in zip(m.origin, vchunks)], dtype=np.int64)
            if tmp.refs is not None and len(tmp.refs):
                t = tmp.refs
                shifted = ChunkTable(_shift(t.coords, k, base), t.offsets, t.sizes, url)
                tables.append(shifted)
                samples.append((url, shifted.coords[0], int(t.offsets[0]), int(t.sizes[0])))
            for key, raw in tmp.inline.items():
                src_coord = np.asarray([[int(p) for p in key.split(".")]] if m.src_shape else [[]], dtype=np.int64)
                vcoord = _shift(src_coord.reshape(1, len(m.src_shape)), k, base)[0]
                inline[".".join(str(int(c)) for c in vcoord) if len(vcoord) else "0"] = raw
    assert chunks is not None and pipeline is not None
    node.chunks = (1,) * (len(shape) - len(chunks)) + tuple(chunks)
    node.filters, node.compressor = pipeline
    node.fill_value = fill_value_json(fill_value_of(d, nd), nd)
    node.refs = ChunkTable.concat(tables, len(shape))
    node.inline.update(inline)
    if ctx.want_sample_check():
        for url, coord, offset, size in samples:  # one chunk of each source, against the VDS's own values
            if not chunk_agrees(d, node, nd, coord, ctx.read_file(url, offset, size)):
                node.refs, node.inline = None, {}
                raise NotPossible(f"a chunk of {os.path.basename(url)} decodes to other values than libhdf5 "
                                  "reads through the virtual dataset")
    return node


def sources_unreadable(ctx: ScanContext, d: h5py.Dataset) -> str | None:
    """Why libhdf5 would read fill values instead of some source's data, or None.

    libhdf5 looks for a virtual dataset's source files beside the file it opened (then in
    the working directory) and silently reads fill values where one is missing.  A file
    opened through fsspec has no folder libhdf5 can look in, so it never finds them.
    """
    names = sorted({m.file_name for m in d.virtual_sources() if m.file_name != "."})
    if not names:
        return None
    if ctx.remote:
        return (f"libhdf5 cannot open the source files of a virtual dataset in a remote file "
                f"(it would read fill values instead of {names[0]})")
    here = os.path.dirname(os.path.abspath(ctx.label.removeprefix("file://")))
    for name in names:
        if "%" in name:  # printf-style patterns name files that may legitimately not exist yet
            continue
        if not (os.path.exists(os.path.join(here, name)) or os.path.exists(name)):
            return f"its source file {name} is missing (libhdf5 reads fill values in its place)"
    return None


def virtual_by_reference(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode,
                         plan: DTypePlan) -> tuple[ArrayNode | None, str]:
    """(node indexed by reference, "") or (None, why it must be inlined)."""
    try:
        return index_virtual(ctx, d, node, plan), ""
    except NotPossible as e:
        node.refs, node.inline = None, {}
        return None, str(e)

