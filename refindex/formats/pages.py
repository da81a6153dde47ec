"""The pages of an index as JSON: where every format keeps them, and how they read back.

Every index form keeps the pages in its ``refindex`` section, which zarr readers, fsspec's
ReferenceFileSystem and kerchunk's tools never look at: the top-level ``"refindex"`` key of
a JSON index (zarr v2 or v3), the ``"refindex"`` section of a parquet index's
``.zmetadata``; an Icechunk repository keeps them in an object of its own beside its
snapshots, named in the commit's record (:mod:`refindex.formats.icechunk`).

The document::

    {"format": 1, "page_size": 1, "file_size": N, "bytes": raw bytes carried,
     "spans": "<base64 of zlib of int64 start deltas then int64 lengths>",
     "data": "<base64 of zlib of the spans' bytes, one after another, holes left out>",
     "holes": {"spans": "<spans, encoded as above>", "sources": [["/array", "chunk key", item], ...]},
     "index_ranges": {"/dataset": "<spans, encoded as above>"},
     "extents": {"paths": ["/dataset", ...], "spans": "<spans, encoded as above, in that order>"},
     "external_links": number of links into other files,
     "reads_elsewhere": ["/virtual dataset with sources in other files", ...]}

or, for a file small enough to be fetched whole by a reader (``Pages.in_file``), no bytes::

    {"format": 1, "page_size": 1, "file_size": N, "bytes": 0, "in_file": true,
     "external_links": ..., "reads_elsewhere": [...]}

A JSON index holds its inline chunks itself, so its pages leave out the bytes equal to an
item of one of them (``holes``: an NWB file's cached specifications, most of a small NWB
file's pages) and a reader takes them from the chunk; parquet and Icechunk indexes keep
their inline chunks elsewhere, so their pages hold every byte.  zlib and base64: any
reader decodes the pages with the standard library.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..codecs import vlen_chunk_items
from ..errors import RefindexError
from ..model import Pages

if TYPE_CHECKING:  # a reader of the pages needs no scanner model
    from ..model import Tree

PAGES_FORMAT = 1
LEVEL = 6  # level 9 takes 5-7x longer for 1-2 % less (docs/h5py.md)

# (array path, model chunk key, item) -> that inline chunk (item -1) or that item of it; None: not there
InlineBytes = Callable[[str, str, int], "bytes | None"]


def encode_spans(starts: np.ndarray, ends: np.ndarray) -> str:
    """Sorted spans as base64 text: start deltas and lengths, zlib-compressed (small integers)."""
    starts = np.asarray(starts, np.int64)
    deltas = np.diff(starts, prepend=np.int64(0))
    raw = deltas.astype("<i8").tobytes() + (np.asarray(ends, np.int64) - starts).astype("<i8").tobytes()
    return base64.standard_b64encode(zlib.compress(raw, LEVEL)).decode("ascii")


def decode_spans(text: str) -> tuple[np.ndarray, np.ndarray]:
    raw = np.frombuffer(zlib.decompress(base64.standard_b64decode(text)), "<i8")
    n = len(raw) // 2
    starts = np.cumsum(raw[:n]).astype(np.int64)
    return starts, starts + raw[n:].astype(np.int64)


def _packed(data: bytes) -> str:
    return base64.standard_b64encode(zlib.compress(data, LEVEL)).decode("ascii")


def pages_document(pages: Pages, tree: Tree | None = None) -> dict[str, Any]:
    """The JSON form of ``pages``; with the ``tree`` a JSON index is written from, the holes its inline
    chunks still fill are left out.  Made once per form (every writer of one scan shares it)."""
    form = "holes" if tree is not None else "whole"
    if pages.encoded is None:
        pages.encoded = {}
    if form not in pages.encoded:
        pages.encoded[form] = _document(pages, _filled_holes(pages, tree) if tree is not None else [])
    return pages.encoded[form]


def _filled_holes(pages: Pages, tree: Tree) -> list[tuple[int, int, str, str, int]]:
    """The holes whose bytes ``tree``'s inline chunks hold (checked one by one: conventions ran since)."""
    out = []
    at = _offsets(pages)
    for start, end, path, key, item in pages.holes:
        if tree_bytes(tree, path, key, item) == pages.data[_position(pages, at, start):][: end - start]:
            out.append((start, end, path, key, item))
    return out


def tree_bytes(tree: Tree, path: str, key: str, item: int) -> bytes | None:
    """An inline chunk of ``tree`` (``item`` -1) or one item of a variable-length one."""
    node = tree.arrays.get(path)
    raw = node.inline.get(key) if node is not None else None
    if raw is None or item < 0:
        return raw
    items = vlen_chunk_items(raw, node.filters, node.compressor)
    return items[item] if items is not None and item < len(items) else None


def _offsets(pages: Pages) -> np.ndarray:
    """Where each span's bytes begin in ``pages.data``."""
    return np.concatenate([[0], np.cumsum(pages.ends - pages.starts)[:-1]]).astype(np.int64)


def _position(pages: Pages, at: np.ndarray, offset: int) -> int:
    """Where the file's byte ``offset`` (inside a span) lies in ``pages.data``."""
    i = int(np.searchsorted(pages.starts, offset, side="right")) - 1
    return int(at[i] + offset - pages.starts[i])


def _document(pages: Pages, holes: list[tuple[int, int, str, str, int]]) -> dict[str, Any]:
    if pages.in_file:
        return {"format": PAGES_FORMAT, "page_size": pages.page_size, "file_size": pages.file_size, "bytes": 0,
                "in_file": True, "external_links": pages.external_links, "reads_elsewhere": list(pages.reads_elsewhere)}
    data = pages.data
    if holes:
        at = _offsets(pages)
        pieces, last = [], 0
        for start, end, *_ in holes:
            lo = _position(pages, at, start)
            pieces.append(data[last:lo])
            last = lo + end - start
        data = b"".join(pieces) + data[last:]
    doc = {"format": PAGES_FORMAT, "page_size": pages.page_size, "file_size": pages.file_size,
           "bytes": pages.nbytes, "spans": encode_spans(pages.starts, pages.ends), "data": _packed(data),
           "index_ranges": {path: encode_spans(*spans) for path, spans in sorted(pages.index_ranges.items())},
           "extents": _extents_document(pages.extents), "external_links": pages.external_links,
           "reads_elsewhere": list(pages.reads_elsewhere)}
    if holes:
        doc["holes"] = {"spans": encode_spans(np.asarray([h[0] for h in holes]), np.asarray([h[1] for h in holes])),
                        "sources": [[path, key, item] for _, _, path, key, item in holes]}
    return doc


def _extents_document(extents: dict[str, tuple[int, int]]) -> dict[str, Any]:
    paths = sorted(extents, key=lambda p: extents[p])
    return {"paths": paths, "spans": encode_spans(np.asarray([extents[p][0] for p in paths], np.int64),
                                                  np.asarray([extents[p][1] for p in paths], np.int64))}


def pages_of_document(doc: Any, *, file: str | None = None, inline: InlineBytes | None = None) -> Pages:
    """:class:`Pages` from their JSON form; a damaged document is a RefindexError naming ``file``.

    ``inline`` gives the index's inline chunks (or items of them) that fill the document's holes; a
    span whose hole cannot be filled (no ``inline``, a chunk that is not there) is dropped, so
    its reads go to the file instead of being served wrong.
    """
    try:
        if doc.get("format") != PAGES_FORMAT:
            raise ValueError(f"pages format {doc.get('format')!r} is not {PAGES_FORMAT}")
        if doc.get("in_file"):
            return Pages.kept_in_file(int(doc["page_size"]), int(doc["file_size"]),
                                      int(doc.get("external_links") or 0), list(doc.get("reads_elsewhere") or []))
        starts, ends = decode_spans(doc["spans"])
        data = zlib.decompress(base64.standard_b64decode(doc["data"]))
        if doc.get("holes"):
            starts, ends, data = _filled(starts, ends, data, doc["holes"], inline)
        if len(data) != int((ends - starts).sum()) or (len(starts) > 1 and (starts[1:] < ends[:-1]).any()):
            raise ValueError("the spans do not match the bytes carried")
        ranges = {path: decode_spans(text) for path, text in (doc.get("index_ranges") or {}).items()}
        ext = doc.get("extents") or {}
        lo, hi = decode_spans(ext["spans"]) if ext.get("spans") else (np.zeros(0, np.int64),) * 2
        extents = {p: (int(a), int(b)) for p, a, b in zip(ext.get("paths") or [], lo.tolist(), hi.tolist())}
        return Pages(int(doc["page_size"]), int(doc["file_size"]), starts, ends, data, ranges, extents,
                     int(doc.get("external_links") or 0), list(doc.get("reads_elsewhere") or []))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, zlib.error, base64.binascii.Error) as e:
        raise RefindexError(f"the index's pages are damaged ({e})", file=file) from e


def _filled(starts: np.ndarray, ends: np.ndarray, data: bytes, holes: dict[str, Any],
            inline: InlineBytes | None) -> tuple[np.ndarray, np.ndarray, bytes]:
    """The spans and their whole bytes, holes filled from the inline chunks (unfillable spans dropped)."""
    h_starts, h_ends = decode_spans(holes["spans"])
    sources = holes["sources"]
    span_of = np.searchsorted(starts, h_starts, side="right") - 1
    out: list[bytes] = []
    keep = np.ones(len(starts), bool)
    pos = 0  # in ``data``
    h = 0
    for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
        piece: list[bytes] = []
        cur = a
        while h < len(h_starts) and span_of[h] == i:
            lo, hi = int(h_starts[h]), int(h_ends[h])
            piece.append(data[pos: pos + lo - cur])
            pos += lo - cur
            path, key, item = sources[h]
            fill = inline(path, key, int(item)) if inline is not None else None
            if fill is None or len(fill) != hi - lo:
                keep[i] = False
                fill = bytes(hi - lo)
            piece.append(fill)
            cur = hi
            h += 1
        piece.append(data[pos: pos + b - cur])
        pos += b - cur
        if keep[i]:
            out.append(b"".join(piece))
    return starts[keep], ends[keep], b"".join(out)


def with_pages(section: dict[str, Any], pages: Pages | None, tree: Tree | None = None) -> dict[str, Any]:
    """An index's ``refindex`` section with the pages in it, when there are any (``tree``: see
    :func:`pages_document`)."""
    return section if pages is None else {**section, "pages": pages_document(pages, tree)}


def encoded_size(doc: dict[str, Any]) -> int:
    """Bytes the pages take in a JSON index (their text)."""
    texts = [doc.get("spans", ""), doc.get("data", ""), *(doc.get("index_ranges") or {}).values()]
    holes = doc.get("holes") or {}
    return sum(len(t) for t in texts) + len(holes.get("spans", "")) + len(str(holes.get("sources", "")))
