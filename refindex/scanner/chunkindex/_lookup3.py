"""Jenkins' lookup3 hash (``hashlittle``, initval 0): the checksum of HDF5's version 2 structures.

libhdf5 stores it after every object header chunk, version 2 B-tree node, fixed and
extensible array block and page.  Many structures of one length are hashed together: the
12-byte rounds run over numpy columns, one row per structure, so ten thousand B-tree
leaves cost the rounds of one.
"""

from __future__ import annotations

import numpy as np

_U32 = np.uint32


def _rot(x: np.ndarray, k: int) -> np.ndarray:
    return (x << _U32(k)) | (x >> _U32(32 - k))


def _mix(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    a -= c; a ^= _rot(c, 4); c += b  # noqa: E702 - lookup3's own layout, one line per step
    b -= a; b ^= _rot(a, 6); a += c  # noqa: E702
    c -= b; c ^= _rot(b, 8); b += a  # noqa: E702
    a -= c; a ^= _rot(c, 16); c += b  # noqa: E702
    b -= a; b ^= _rot(a, 19); a += c  # noqa: E702
    c -= b; c ^= _rot(b, 4); b += a  # noqa: E702


def _final(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    c ^= b; c -= _rot(b, 14)  # noqa: E702
    a ^= c; a -= _rot(c, 11)  # noqa: E702
    b ^= a; b -= _rot(a, 25)  # noqa: E702
    c ^= b; c -= _rot(b, 16)  # noqa: E702
    a ^= c; a -= _rot(c, 4)  # noqa: E702
    b ^= a; b -= _rot(a, 14)  # noqa: E702
    c ^= b; c -= _rot(b, 24)  # noqa: E702


M = 0xFFFFFFFF
FEW = 32  # fewer rows than this are hashed one by one in Python ints (numpy's per-call cost dominates there)


def hash_one(data: bytes) -> int:
    """lookup3 of one byte string with Python ints: long single structures (data blocks) hash
    faster this way than through numpy arrays of one element."""
    length = len(data)
    a = b = c = (0xDEADBEEF + length) & M
    if not length:
        return c
    blocks = -(-length // 12)
    words = np.frombuffer(data + bytes(blocks * 12 - length), "<u4").tolist()
    for i in range(0, 3 * (blocks - 1), 3):
        a = (a + words[i]) & M
        b = (b + words[i + 1]) & M
        c = (c + words[i + 2]) & M
        a = (a - c) & M; a ^= ((c << 4) | (c >> 28)) & M; c = (c + b) & M  # noqa: E702
        b = (b - a) & M; b ^= ((a << 6) | (a >> 26)) & M; a = (a + c) & M  # noqa: E702
        c = (c - b) & M; c ^= ((b << 8) | (b >> 24)) & M; b = (b + a) & M  # noqa: E702
        a = (a - c) & M; a ^= ((c << 16) | (c >> 16)) & M; c = (c + b) & M  # noqa: E702
        b = (b - a) & M; b ^= ((a << 19) | (a >> 13)) & M; a = (a + c) & M  # noqa: E702
        c = (c - b) & M; c ^= ((b << 4) | (b >> 28)) & M; b = (b + a) & M  # noqa: E702
    i = 3 * (blocks - 1)
    a, b, c = (a + words[i]) & M, (b + words[i + 1]) & M, (c + words[i + 2]) & M
    c ^= b; c = (c - (((b << 14) | (b >> 18)) & M)) & M  # noqa: E702
    a ^= c; a = (a - (((c << 11) | (c >> 21)) & M)) & M  # noqa: E702
    b ^= a; b = (b - (((a << 25) | (a >> 7)) & M)) & M  # noqa: E702
    c ^= b; c = (c - (((b << 16) | (b >> 16)) & M)) & M  # noqa: E702
    a ^= c; a = (a - (((c << 4) | (c >> 28)) & M)) & M  # noqa: E702
    b ^= a; b = (b - (((a << 14) | (a >> 18)) & M)) & M  # noqa: E702
    c ^= b; c = (c - (((b << 24) | (b >> 8)) & M)) & M  # noqa: E702
    return c


def lookup3(rows: np.ndarray) -> np.ndarray:
    """The lookup3 hash of every row of an ``(n, length)`` uint8 matrix, as uint32[n]."""
    rows = np.asarray(rows, np.uint8)
    n, length = rows.shape
    if n < FEW:
        return np.asarray([hash_one(r.tobytes()) for r in rows], _U32)
    a = np.full(n, (0xDEADBEEF + length) & 0xFFFFFFFF, _U32)
    b, c = a.copy(), a.copy()
    if length == 0:
        return c
    blocks = -(-length // 12)
    padded = np.zeros((n, blocks * 12), np.uint8)
    padded[:, :length] = rows
    words = padded.view("<u4").astype(_U32, copy=False).reshape(n, blocks, 3)
    for i in range(blocks - 1):
        a += words[:, i, 0]
        b += words[:, i, 1]
        c += words[:, i, 2]
        _mix(a, b, c)
    a += words[:, -1, 0]  # the last 1-12 bytes, zero padded (adding zeros changes nothing)
    b += words[:, -1, 1]
    c += words[:, -1, 2]
    _final(a, b, c)
    return c


def checksums_ok(rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per row: do its first ``lengths[i]`` bytes hash to the little-endian uint32 stored right after them?

    Rows of one length are hashed together (few distinct lengths in practice).
    """
    rows = np.asarray(rows, np.uint8)
    lengths = np.asarray(lengths, np.int64)
    ok = np.zeros(len(rows), bool)
    if not len(rows):
        return ok
    fits = (lengths >= 0) & (lengths + 4 <= rows.shape[1])
    for length in np.unique(lengths[fits]).tolist():
        idx = np.nonzero(fits & (lengths == length))[0]
        part = rows[idx]
        stored = np.ascontiguousarray(part[:, length:length + 4]).view("<u4").reshape(-1)
        ok[idx] = lookup3(part[:, :length]) == stored
    return ok
