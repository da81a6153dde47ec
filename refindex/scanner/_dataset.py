"""One dataset -> one :class:`~refindex.model.ArrayNode`: its datatype plan, attributes,
dimension names, then the layout that decides where its chunks' bytes are."""

from __future__ import annotations

import h5py
import numpy as np

from ..codecs import (DTypePlan, describe_number_type, fill_value_json, holds_zarr_lacks, packed_dtype, plan_dtype,
                      stored_as_numpy, string_padding, view_dtype_attr)
from ..model import ArrayNode, chunk_key
from ..source import reads_other_files
from ._attrs import attributes_of, ref_json, unsafe_type
from ._chunked import chunked
from ._context import ScanContext, fill_value_of, filters_decodable
from ._contiguous import contiguous, external_storage
from ._dims import dims_of, phony_dim
from ._inline import inline_converted, inline_decoded
from ._strings import STRINGS_INLINE_MAX, stored_strings_clean
from ._virtual import sources_unreadable, virtual_by_reference


def build_array(ctx: ScanContext, d: h5py.Dataset, path: str) -> ArrayNode:
    dsid = d.id
    dcpl = dsid.get_create_plist()
    filters_decodable(dcpl if not d.is_virtual else None)  # a virtual dataset's values: its sources' filters
    why = unsafe_type(dsid.get_type())
    if why:
        raise ctx.fail(path, why)
    dt = d.dtype
    try:
        plan = plan_dtype(dt, lambda r: ref_json(ctx, r))
    except ValueError as e:
        raise ctx.fail(path, str(e)) from e
    types: dict[str, str] = {}
    attrs = attributes_of(ctx, d, path, types)
    attrs.update(plan.attrs)
    oid = attrs.get("object_id") if isinstance(attrs.get("object_id"), str) else None

    if d.shape is None:  # null dataspace: no elements, not even a scalar
        node = ArrayNode(path, (0,), (1,), plan.dtype if plan.dtype is not None else "|u1", None,
                         attrs=attrs, kind=plan.kind, object_id=oid, attr_types=types)
        node.filters = [plan.object_codec] if plan.object_codec else None
        node.attrs["refindex_null_dataspace"] = True
        node.attrs["_ARRAY_DIMENSIONS"] = [phony_dim(ctx, path, 0, [])]
        return node

    shape = tuple(int(s) for s in d.shape) + plan.extra_shape
    node = ArrayNode(path, shape, shape, plan.dtype, None, attrs=attrs, kind=plan.kind,
                     scalar=(d.shape == ()), object_id=oid, attr_types=types)
    text = h5py.check_string_dtype(dt)
    node.charset = text.encoding if text is not None else None
    node.attrs["_ARRAY_DIMENSIONS"] = dims_of(ctx, d, path, len(plan.extra_shape))

    if d.is_virtual:
        return virtual(ctx, d, node, plan)
    if dcpl.get_external_count() > 0:
        return external_storage(ctx, d, node, plan, dcpl)
    if not plan.raw:
        return inline_converted(ctx, d, node, plan)

    nd = plan.numpy_dtype if plan.numpy_dtype is not None else dt
    if holds_zarr_lacks(nd):
        node.attrs["refindex_hdf5_type"] = describe_number_type(dsid.get_type())
    if not stored_as_numpy(dsid.get_type(), nd):
        node = inline_decoded(ctx, d, node, plan, "numbers stored in a layout numpy has no type for "
                              f"({describe_number_type(dsid.get_type())}): copied in as h5py converts them")
        if holds_zarr_lacks(nd):
            node.attrs["refindex_view_dtype"] = view_dtype_attr(packed_dtype(nd))
        return node
    node.fill_value = fill_value_json(fill_value_of(d, nd), nd)
    layout = dcpl.get_layout()
    if layout == h5py.h5d.COMPACT:
        node.chunks = tuple(max(1, s) for s in shape)
        if d.size:
            with ctx.reading("data", path):
                data = np.ascontiguousarray(d[()])
            node.inline[chunk_key((0,) * len(shape))] = data.tobytes()
            ctx.tree.copied.append((h5py.h5g.get_objinfo(dsid).objno[0], -1, path, chunk_key((0,) * len(shape))))
        return node
    if ctx.hdmf and plan.kind == "str" and d.size <= 1 and len(shape) <= 1:
        # one fixed-length text: the hdmf conventions state it as text (a str), from these bytes
        return inline_decoded(ctx, d, node, plan, "fixed-length text of an HDMF file", note=False)
    strpad = string_padding(dsid.get_type())
    if strpad:
        strpad, why = strings_plan(ctx, d, nd, strpad)
        if why:
            return inline_decoded(ctx, d, node, plan, why)
    if layout == h5py.h5d.CONTIGUOUS:
        node = contiguous(ctx, d, node, nd)
        if strpad:
            node.filters = [strpad]
        return node
    if layout == h5py.h5d.CHUNKED:
        return chunked(ctx, d, node, plan, nd, dcpl, strpad)
    raise ctx.fail(path, f"unknown storage layout {layout}")


def strings_plan(ctx: ScanContext, d: h5py.Dataset, nd: np.dtype, strpad: dict) -> tuple[dict | None, str]:
    """(string codec or None, reason to copy the values in instead) for fixed-length strings
    libhdf5 may normalise: clean ones need no codec; changed ones are copied in, normalised,
    up to ``STRINGS_INLINE_MAX`` (``inline_max`` when ``portable``), beyond which the codec
    does what libhdf5 does."""
    limit = ctx.opts.inline_max if ctx.opts.portable else min(STRINGS_INLINE_MAX, ctx.opts.inline_max)
    with ctx.checking():
        clean = stored_strings_clean(d, nd, ctx.opts.inline_max)  # None: larger, not read
    if clean:
        return None, ""
    nbytes = int(np.prod(d.shape or (), dtype=np.int64)) * nd.itemsize
    if ctx.opts.portable or (clean is False and nbytes <= limit):
        return None, ("fixed-length strings whose stored bytes libhdf5 changes on read (bytes after the "
                      "terminator, space padding): copied in as h5py reads them")
    return strpad, ""


def virtual(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, plan: DTypePlan) -> ArrayNode:
    """References into the source files where the mappings allow it, else inline values."""
    try:
        elsewhere = reads_other_files(d.id)
    except Exception:  # noqa: BLE001 - mappings h5py cannot list: the indexing below says why
        elsewhere = False
    if elsewhere:
        ctx.tree.reads_elsewhere.append(node.path)  # libhdf5 opens other files for its values
        if not ctx.remote and getattr(ctx.f, "driver", None) == "fileobj":
            # A local file read through a file object (a scan recording its pages): libhdf5 would
            # open the sources through that same object and read fill values.  By its path, it
            # opens them as files of their own.
            with h5py.File(ctx.label, "r") as by_path:
                vd = by_path[node.path]
                # an unlimited mapping's extent comes from its sources, found only when opened by path
                shape = tuple(int(s) for s in vd.shape) + plan.extra_shape
                if shape != node.shape:
                    node.shape = node.chunks = shape
                    node.attrs["_ARRAY_DIMENSIONS"] = dims_of(ctx, vd, node.path, len(plan.extra_shape))
                return _virtual(ctx, vd, node, plan)
    return _virtual(ctx, d, node, plan)


def _virtual(ctx: ScanContext, d: h5py.Dataset, node: ArrayNode, plan: DTypePlan) -> ArrayNode:
    done, why = virtual_by_reference(ctx, d, node, plan)
    if done is not None:
        return done
    problem = sources_unreadable(ctx, d)
    if problem:  # the values libhdf5 would give are fill values, not the data
        raise ctx.fail(node.path, f"virtual dataset cannot be indexed by reference ({why}), and {problem}")
    return inline_decoded(ctx, d, node, plan, f"virtual dataset (data gathered from its source files: {why})")
