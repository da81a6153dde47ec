"""Which package provides each codec an index names, and zarr's own verdict on an array's metadata.

A reader needs numcodecs (zarr's dependency) and imagecodecs for the codecs refindex
chooses first; refindex's own decode-only codecs only where no stock one reads the
stored bytes.  Every array's ``.zarray`` is parsed by zarr here, at scan time, the way
a reader's zarr will parse it, so what zarr refuses never reaches an index.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

NUMCODECS = frozenset({
    "zlib", "gzip", "shuffle", "fletcher32", "zstd", "bz2", "blosc", "lz4", "astype",
    "vlen-utf8", "vlen-bytes", "vlen-array",
})


def codec_provider(codec_id: str) -> str:
    """"numcodecs", "imagecodecs" or "refindex" (or "unknown") for a codec id of a v2 index (a name in
    a v3 index: :func:`refindex.codecs.codec_provider_v3`)."""
    if codec_id in NUMCODECS:
        return "numcodecs"
    if codec_id.startswith("imagecodecs_"):
        return "imagecodecs"
    if codec_id.startswith("refindex_"):
        return "refindex"
    return "unknown"


def stock(codec_id: str) -> bool:
    """Does a reader of a v2 index decode this codec id with numcodecs/imagecodecs alone?"""
    return codec_provider(codec_id) in ("numcodecs", "imagecodecs")


def codec_ids(docs: Iterable[dict[str, Any]]) -> list[str]:
    """The sorted codec ids of these ``.zarray`` documents (filters and compressors)."""
    ids: set[str] = set()
    for doc in docs:
        for c in [doc.get("compressor")] + list(doc.get("filters") or []):
            if isinstance(c, dict) and isinstance(c.get("id"), str):
                ids.add(c["id"])
    return sorted(ids)


_verdicts: dict[str, str | None] = {}


def zarr_refusal(doc: dict[str, Any]) -> str | None:
    """Why zarr would not open an array with this ``.zarray`` (None: it opens it).

    zarr's own parser decides (dtype, fill value, every codec resolved), with the codecs
    a reader has: numcodecs', imagecodecs' and, for ids naming them, refindex's own.
    Verdicts are kept per document shape-free, so many alike arrays cost one parse.
    """
    key = json.dumps({k: v for k, v in doc.items() if k not in ("shape", "chunks")} | {"ndim": len(doc["shape"])},
                     sort_keys=True, default=str)
    if key not in _verdicts:
        from zarr.core.metadata.v2 import ArrayV2Metadata

        from ._runtime import register_codecs, register_stock_codecs

        if any(codec_provider(c) != "numcodecs" for c in codec_ids([doc])):  # imagecodecs' import: ~15 ms
            register_stock_codecs()
            register_codecs()
        probe = dict(doc, shape=[1] * len(doc["shape"]), chunks=[1] * len(doc["shape"]))
        try:
            ArrayV2Metadata.from_dict(probe)
            _verdicts[key] = None
        except Exception as e:  # noqa: BLE001 - any refusal is the answer
            _verdicts[key] = f"{type(e).__name__}: {e}".splitlines()[0]
    return _verdicts[key]
