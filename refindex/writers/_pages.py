"""The pages of an index as JSON: where every format keeps them, and how they read back.

Every index form keeps the pages in its ``refindex`` section, which zarr readers, fsspec's
ReferenceFileSystem and kerchunk's tools never look at: the top-level ``"refindex"`` key of
a JSON index (zarr v2 or v3), the ``"refindex"`` section of a parquet index's
``.zmetadata``; an Icechunk repository keeps them in an object of its own beside its
snapshots, named in the commit's record (:mod:`refindex.writers.icechunk`).

The document::

    {"format": 1, "page_size": 512, "file_size": N, "bytes": raw bytes carried,
     "spans": "<base64 of zlib of int64 start deltas then int64 lengths>",
     "data": "<base64 of zlib of the spans' bytes, one after another>",
     "index_ranges": {"/dataset": "<spans, encoded as above>"},
     "extents": {"paths": ["/dataset", ...], "spans": "<spans, encoded as above, in that order>"},
     "external_links": number of links into other files,
     "reads_elsewhere": ["/virtual dataset with sources in other files", ...]}

zlib and base64: any reader decodes it with the standard library.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

import numpy as np

from ..errors import RefindexError
from ..model import Pages

PAGES_FORMAT = 1
LEVEL = 6  # level 9 takes 5-7x longer for 1-2 % less (docs/h5py.md)


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


def pages_document(pages: Pages) -> dict[str, Any]:
    """The JSON form of ``pages`` (made once: every writer of one scan shares it)."""
    if pages.encoded is None:
        pages.encoded = _document(pages)
    return pages.encoded


def _document(pages: Pages) -> dict[str, Any]:
    return {"format": PAGES_FORMAT, "page_size": pages.page_size, "file_size": pages.file_size,
            "bytes": pages.nbytes, "spans": encode_spans(pages.starts, pages.ends),
            "data": base64.standard_b64encode(zlib.compress(pages.data, LEVEL)).decode("ascii"),
            "index_ranges": {path: encode_spans(*spans) for path, spans in sorted(pages.index_ranges.items())},
            "extents": _extents_document(pages.extents), "external_links": pages.external_links,
            "reads_elsewhere": list(pages.reads_elsewhere)}


def _extents_document(extents: dict[str, tuple[int, int]]) -> dict[str, Any]:
    paths = sorted(extents, key=lambda p: extents[p])
    return {"paths": paths, "spans": encode_spans(np.asarray([extents[p][0] for p in paths], np.int64),
                                                  np.asarray([extents[p][1] for p in paths], np.int64))}


def pages_of_document(doc: Any, *, file: str | None = None) -> Pages:
    """:class:`Pages` from their JSON form; a damaged document is a RefindexError naming ``file``."""
    try:
        if doc.get("format") != PAGES_FORMAT:
            raise ValueError(f"pages format {doc.get('format')!r} is not {PAGES_FORMAT}")
        starts, ends = decode_spans(doc["spans"])
        data = zlib.decompress(base64.standard_b64decode(doc["data"]))
        if len(data) != int((ends - starts).sum()) or (len(starts) > 1 and (starts[1:] < ends[:-1]).any()):
            raise ValueError("the spans do not match the bytes carried")
        ranges = {path: decode_spans(text) for path, text in (doc.get("index_ranges") or {}).items()}
        ext = doc.get("extents") or {}
        lo, hi = decode_spans(ext["spans"]) if ext.get("spans") else (np.zeros(0, np.int64),) * 2
        extents = {p: (int(a), int(b)) for p, a, b in zip(ext.get("paths") or [], lo.tolist(), hi.tolist())}
        return Pages(int(doc["page_size"]), int(doc["file_size"]), starts, ends, data, ranges, extents,
                     int(doc.get("external_links") or 0), list(doc.get("reads_elsewhere") or []))
    except (KeyError, TypeError, ValueError, AttributeError, zlib.error, base64.binascii.Error) as e:
        raise RefindexError(f"the index's pages are damaged ({e})", file=file) from e


def with_pages(section: dict[str, Any], pages: Pages | None) -> dict[str, Any]:
    """An index's ``refindex`` section with the pages in it, when there are any."""
    return section if pages is None else {**section, "pages": pages_document(pages)}


def encoded_size(doc: dict[str, Any]) -> int:
    """Bytes the pages take in a JSON index (their text)."""
    return len(doc.get("spans", "")) + len(doc.get("data", "")) + sum(len(t) for t in
                                                                     (doc.get("index_ranges") or {}).values())
