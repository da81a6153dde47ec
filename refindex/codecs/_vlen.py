"""The items of a variable-length chunk as numcodecs lays them out (``vlen-utf8``, ``vlen-bytes``):
an item count, then each item's length and bytes (little-endian 32-bit integers).

Small and dependency-free: the h5py road rebuilds the global heap objects of cached NWB
specifications from the index's own copies of them (:mod:`refindex.formats.pages`) while a
file opens, where importing numcodecs would cost more than the decoding.
"""

from __future__ import annotations

import zlib
from typing import Any

VLEN_IDS = ("vlen-utf8", "vlen-bytes")


def vlen_items(data: bytes) -> list[bytes]:
    """The items of one encoded chunk; ValueError when ``data`` is not in that layout."""
    if len(data) < 4:
        raise ValueError("too short for a vlen chunk")
    n = int.from_bytes(data[:4], "little")
    out: list[bytes] = []
    at = 4
    for _ in range(n):
        if at + 4 > len(data):
            raise ValueError("truncated vlen chunk")
        size = int.from_bytes(data[at:at + 4], "little")
        at += 4
        if at + size > len(data):
            raise ValueError("truncated vlen chunk")
        out.append(bytes(data[at:at + size]))
        at += size
    if at != len(data):
        raise ValueError("trailing bytes after the vlen items")
    return out


def vlen_chunk_items(raw: bytes, filters: Any, compressor: Any) -> list[bytes] | None:
    """The items of an inline chunk stored as vlen-utf8/vlen-bytes, optionally zlib-compressed (v2
    ``filters``/``compressor`` dicts); None for any other pipeline or bytes that do not decode."""
    if not filters or len(filters) != 1 or (filters[0] or {}).get("id") not in VLEN_IDS:
        return None
    try:
        if compressor:
            if compressor.get("id") != "zlib":
                return None
            raw = zlib.decompress(raw)
        return vlen_items(raw)
    except (ValueError, zlib.error):
        return None


def v2_pipeline(codecs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]] | None, dict[str, Any] | None]:
    """A zarr v3 codec list of the form vlen-utf8/vlen-bytes [+ zlib] as v2 (filters, compressor); else (None, None)."""
    names = [c.get("name") for c in codecs]
    if not names or names[0] not in VLEN_IDS or len(names) > 2:
        return None, None
    if len(names) == 2 and names[1] not in ("numcodecs.zlib", "zlib"):
        return None, None
    return [{"id": names[0]}], ({"id": "zlib"} if len(names) == 2 else None)
