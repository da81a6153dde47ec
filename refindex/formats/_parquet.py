"""Write an index as parquet references: fsspec's ``LazyReferenceMapper`` layout.

Layout (what ``fsspec.filesystem("reference", fo=DIR)`` reads lazily):

- ``DIR/.zmetadata``: JSON ``{"metadata": {key: document}, "record_size": R, ...}``
  holding every ``.zgroup``/``.zarray``/``.zattrs`` document.  We also write
  ``"zarr_consolidated_format": 1`` (so zarr reads it as consolidated metadata) and a
  ``"refindex"`` section (URL templates and provenance); fsspec ignores both.
- ``DIR/<array key>/refs.<n>.parq``: columns ``path`` (string URL), ``offset``,
  ``size`` (int64) and ``raw`` (inline bytes).  Row ``i`` of record ``n`` is the
  chunk whose C-order index in the chunk grid is ``n * R + i``; null ``path`` and
  ``raw`` means "no chunk stored" (read as the fill value).

Why a writer of our own: the records are built straight from the scanner's numpy
chunk tables, one record (``R`` rows) at a time, so memory stays bounded whatever
the chunk count (a JSON index needs a dict entry per chunk).  The folder is written
under a temporary name beside the destination and renamed into place.
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterator

import numpy as np

from .. import urls
from ..errors import RefindexError
from ..model import ZMETADATA, ArrayNode, Tree, key_of
from ._atomic import atomic_folder
from .pages import with_pages
from ._refs import FORMAT_VERSION, metadata_items, metadata_json, url_templates

DEFAULT_RECORD_SIZE = 100_000


def grid_shape(node: ArrayNode) -> tuple[int, ...]:
    """Chunks along each axis, as fsspec's reader computes them (a scalar is one chunk)."""
    grid = tuple(math.ceil(s / c) for s, c in zip(node.shape, node.chunks))
    return grid or (1,)


def _inline_coords(node: ArrayNode) -> tuple[np.ndarray, list[bytes]]:
    """Grid coordinates (n, ndim) and bytes of the inline chunks of ``node``."""
    ndim = len(node.shape)
    keys = sorted(node.inline)
    if ndim == 0:
        coords = np.zeros((len(keys), 1), dtype=np.int64)
    else:
        coords = np.array([[int(p) for p in k.split(".")] for k in keys], dtype=np.int64).reshape(len(keys), ndim)
    return coords, [node.inline[k] for k in keys]


def _int64_view(a: np.ndarray) -> np.ndarray:
    """``a`` as int64 without a copy when it is (u)int64: byte offsets/sizes are < 2**63."""
    a = np.ascontiguousarray(a)
    return a.view(np.int64) if a.dtype in (np.uint64, np.int64) else a.astype(np.int64)


def _linear(coords: np.ndarray, grid: tuple[int, ...], what: str) -> tuple[np.ndarray, np.ndarray]:
    """C-order chunk numbers of ``coords`` (and the mask of rows inside the grid)."""
    if coords.shape[1] == 0:  # scalar: one chunk, number 0
        coords = np.zeros((coords.shape[0], 1), dtype=np.int64)
    inside = np.all((coords >= 0) & (coords < np.asarray(grid, dtype=np.int64)), axis=1)
    if not inside.all():  # chunks outside the current extent can never be read
        coords = coords[inside]
    strides = np.ones(len(grid), dtype=np.int64)
    for i in range(len(grid) - 2, -1, -1):
        strides[i] = strides[i + 1] * grid[i + 1]
    if math.prod(grid) >= 2**62:
        raise RefindexError(f"{what}: chunk grid {grid} too large for parquet references")
    return coords @ strides if len(coords) else np.zeros(0, dtype=np.int64), inside


# Arrow columns straight from numpy buffers: ``pa.array`` imports pandas on its first call
# (about 0.45 s, more than writing 500,000 references takes), ``Array.from_buffers`` does not.
def _validity(valid: np.ndarray | None) -> Any:
    import pyarrow as pa

    return None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))


def numbers(values: np.ndarray, arrow_type: Any, valid: np.ndarray | None = None) -> Any:
    """A fixed-width Arrow column of ``values`` (numpy, already of ``arrow_type``'s width); nulls where not ``valid``."""
    import pyarrow as pa

    data = np.ascontiguousarray(values)
    return pa.Array.from_buffers(arrow_type, len(data), [_validity(valid), pa.py_buffer(data)])


def blobs(items: list[bytes | None], arrow_type: Any) -> Any:
    """A string/binary Arrow column (``None``: null)."""
    import pyarrow as pa

    lengths = np.fromiter((0 if b is None else len(b) for b in items), dtype=np.int64, count=len(items))
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise RefindexError("inline bytes of one parquet record exceed 2 GiB")
    valid = np.fromiter((b is not None for b in items), dtype=bool, count=len(items))
    return pa.Array.from_buffers(arrow_type, len(items), [_validity(None if valid.all() else valid),
                                                          pa.py_buffer(offsets.astype(np.int32)),
                                                          pa.py_buffer(b"".join(b for b in items if b is not None))])


def array_records(node: ArrayNode, tree_url: str, record_size: int) -> Iterator[tuple[int, Any]]:
    """(record number, pyarrow Table) for every record of ``node``; built one at a time."""
    import pyarrow as pa

    grid = grid_shape(node)
    total = math.prod(grid)
    if total == 0:
        return
    what = node.path
    t = node.refs
    if t is not None and len(t):
        lin, inside = _linear(t.coords.astype(np.int64, copy=False), grid, what)
        offs, sizes = _int64_view(t.offsets), _int64_view(t.sizes)  # no copies of millions of chunks
        urls, which = t.row_urls()  # several files: a virtual dataset's sources
        if not inside.all():
            offs, sizes, which = offs[inside], sizes[inside], which[inside]
        if len(lin) > 1 and not np.all(lin[1:] > lin[:-1]):
            order = np.argsort(lin, kind="stable")
            lin, offs, sizes, which = lin[order], offs[order], sizes[order], which[order]
        urls = [u or tree_url for u in urls]
    else:
        lin = np.zeros(0, dtype=np.int64)
        offs = sizes = lin
        urls, which = [tree_url], np.zeros(0, dtype=np.int32)
    icoords, iblobs = _inline_coords(node)
    ilin, iinside = _linear(icoords, grid, what)
    iblobs = [b for b, keep in zip(iblobs, iinside) if keep]
    iorder = np.argsort(ilin, kind="stable")
    ilin = ilin[iorder]
    iblobs = [iblobs[i] for i in iorder]
    dictionary = blobs([u.encode("utf-8") for u in urls], pa.string())
    schema = pa.schema([
        pa.field("path", pa.dictionary(pa.int32(), pa.string())),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("raw", pa.binary()),
    ])
    for rec in range((total + record_size - 1) // record_size):
        lo = rec * record_size
        n = min(record_size, total - lo)
        a, b = np.searchsorted(lin, [lo, lo + n])
        rows = lin[a:b] - lo
        offset = np.zeros(n, dtype=np.int64)
        size = np.zeros(n, dtype=np.int64)
        offset[rows] = offs[a:b]
        size[rows] = sizes[a:b]
        present = np.zeros(n, dtype=bool)
        present[rows] = True
        file_of = np.zeros(n, dtype=np.int32)
        file_of[rows] = which[a:b]
        ia, ib = np.searchsorted(ilin, [lo, lo + n])
        if ib > ia:
            raw_list: list[bytes | None] = [None] * n
            for j in range(ia, ib):
                r = int(ilin[j] - lo)
                if not present[r]:  # a referenced chunk wins, as in the JSON writer
                    raw_list[r] = iblobs[j]
            raw = blobs(raw_list, pa.binary())
        else:
            raw = pa.nulls(n, type=pa.binary())
        path = pa.DictionaryArray.from_arrays(numbers(file_of, pa.int32(), valid=present), dictionary)
        yield rec, pa.Table.from_arrays([path, numbers(offset, pa.int64()), numbers(size, pa.int64()), raw],
                                        schema=schema)


def metadata_document(tree: Tree, record_size: int) -> dict[str, Any]:
    """The ``.zmetadata`` document: LazyReferenceMapper's keys plus consolidated-format and provenance."""
    meta = dict(metadata_items(tree))
    prov = tree.provenance | ({"skipped": tree.skipped} if tree.skipped else {})
    return {
        "metadata": meta,
        "record_size": int(record_size),
        "zarr_consolidated_format": 1,
        "refindex": with_pages({"format": "parquet", "version": FORMAT_VERSION, "templates": url_templates(tree),
                                **prov}, tree.pages),
    }


def prepare_destination(out_dir: str) -> None:
    """Refuse to replace anything that is not a parquet index (or an empty folder)."""
    if os.path.isfile(out_dir):
        raise RefindexError("output exists and is a file, not a parquet index folder", file=out_dir)
    if os.path.isdir(out_dir) and os.listdir(out_dir) and not os.path.isfile(os.path.join(out_dir, ZMETADATA)):
        raise RefindexError("output folder exists and is not a parquet index; refusing to replace it", file=out_dir)


def write_record(table: Any, path: str, compression: str = "zstd") -> None:
    """One ``refs.N.parq`` file, written the way fsspec's reader (and fastparquet) read it back."""
    import pyarrow.parquet as pq

    # Statistics (null count 0) on offset/size: without them fastparquet reads them as float64.
    # Delta encoding: offsets grow by about one chunk size per row, so a few bytes per chunk.
    pq.write_table(table, path, compression=compression, write_statistics=["offset", "size"],
                   use_dictionary=["path"],
                   column_encoding={"offset": "DELTA_BINARY_PACKED", "size": "DELTA_BINARY_PACKED"})


def write_parquet(tree: Tree, out_dir: str | os.PathLike, *, record_size: int = DEFAULT_RECORD_SIZE,
                  compression: str = "zstd", metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``tree`` as parquet references into the folder ``out_dir`` atomically.

    ``metadata``: the ``.zmetadata`` document (default :func:`metadata_document`, zarr v2;
    a zarr v3 index passes its own).  Returns a summary: records (files), chunks
    referenced, inline chunks, bytes written.
    """
    if not urls.is_local(os.fspath(out_dir)):
        raise RefindexError("parquet output must be a local folder", file=os.fspath(out_dir))
    out_dir = urls.normalise(os.fspath(out_dir))
    if record_size < 1:
        raise RefindexError(f"record_size must be positive, got {record_size}", file=out_dir)
    prepare_destination(out_dir)
    summary = {"records": 0, "chunks_referenced": 0, "inline_chunks": 0, "bytes": 0}
    with atomic_folder(out_dir) as tmp:
        for path in sorted(tree.arrays):
            node = tree.arrays[path]
            field = key_of(path)
            if not field:
                raise RefindexError("an array at the root cannot be stored as parquet references", file=tree.url)
            folder = os.path.join(tmp, *field.split("/"))
            os.makedirs(folder, exist_ok=True)
            for rec, table in array_records(node, tree.url, record_size):
                write_record(table, os.path.join(folder, f"refs.{rec}.parq"), compression)
                summary["records"] += 1
            summary["chunks_referenced"] += len(node.refs) if node.refs is not None else 0
            summary["inline_chunks"] += len(node.inline)
        doc = metadata_document(tree, record_size) if metadata is None else metadata
        with open(os.path.join(tmp, ZMETADATA), "w", encoding="utf-8") as fh:
            fh.write(metadata_json(doc))
        summary["bytes"] = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tmp) for f in fs)
    return summary
