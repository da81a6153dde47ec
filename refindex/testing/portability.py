"""HDF5 files with what zarr readers trip over: long doubles, complex256 in both byte orders,
numbers in layouts numpy lacks, fixed-length strings clean and dirty, datetimes with
unwritten chunks, and every filter with a stock decoder (tests and golden digests share them).

Bytes are written as they should be stored (memory type = file type, no conversion), so
the files are the same on every run: libhdf5's own conversion to a big-endian long double
leaves whatever memory held in the six unused bytes.
"""

from __future__ import annotations

import os

import h5py
import numpy as np

from ..codecs import clear_long_padding

h5t = h5py.h5t

LONG_VALUES = np.array([1.5, -2.25, 1e-300, 1e300, 0.0, -0.0, np.inf, np.nan], dtype=np.longdouble) / 3
BF16_VALUES = np.array([1.0, -2.5, 3.140625, 0.0, 65280.0, -0.0078125, np.inf, -np.inf] * 16, dtype="<f4")
STRINGS = {  # name -> (pad, stored bytes of each element)
    "clean": (h5t.STR_NULLTERM, [b"ab\0\0\0\0\0\0", b"abcdefgh", b"\0\0\0\0\0\0\0\0"]),
    "garbage": (h5t.STR_NULLTERM, [b"ab\0XYZ\x01\x02", b"\0garbage", b"abcdefgh"]),
    "space": (h5t.STR_SPACEPAD, [b"ab      ", b"a b  \0  ", b"abcdefgh"]),
    "nullpad": (h5t.STR_NULLPAD, [b"ab\0XYZ\x01\x02", b"abcdefgh", b"\0\0\0\0\0\0\0\0"]),
}


def _write_raw(f: h5py.File, name: str, ftype, stored: np.ndarray, chunks: tuple | None = None) -> None:
    """A dataset of type ``ftype`` holding exactly ``stored``'s bytes."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    if chunks:
        dcpl.set_chunk(chunks)
        dcpl.set_deflate(4)
    space = h5py.h5s.create_simple(stored.shape)
    ds = h5py.h5d.create(f.id, name.encode(), ftype, space, dcpl=dcpl)
    ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(stored), mtype=ftype)


def _long_type(big: bool):
    t = h5t.py_create(np.dtype(np.longdouble)).copy()
    if big:
        t.set_order(h5t.ORDER_BE)
    return t


def _complex_long_type(big: bool):
    part = _long_type(big)
    t = h5t.create(h5t.COMPOUND, 2 * part.get_size())
    t.insert(b"r", 0, part)
    t.insert(b"i", part.get_size(), part)
    return t


def write_long_doubles(f: h5py.File) -> None:
    """``ld_le``/``ld_be`` (contiguous), ``ld_chunked`` (gzip), ``c256_le``/``c256_be``, compound ``ld_record``."""
    for big in (False, True):
        order = ">" if big else "<"
        tag = "be" if big else "le"
        _write_raw(f, f"ld_{tag}", _long_type(big), clear_long_padding(LONG_VALUES.astype(f"{order}f16")))
        c = np.empty(4, np.clongdouble)
        c.real, c.imag = LONG_VALUES[:4], LONG_VALUES[4:][::-1]
        c = c.astype(f"{order}c32")
        _write_raw(f, f"c256_{tag}", _complex_long_type(big), clear_long_padding(c))
    chunked = clear_long_padding((np.arange(40, dtype=np.longdouble) / 7).astype("<f16"))
    _write_raw(f, "ld_chunked", _long_type(False), chunked, chunks=(16,))
    rec = h5t.create(h5t.COMPOUND, 20)  # no gap between members: libhdf5 leaves gaps as memory held them
    rec.insert(b"n", 0, h5t.STD_I32LE)
    rec.insert(b"x", 4, _long_type(False))
    values = np.zeros(3, np.dtype({"names": ["n", "x"], "formats": ["<i4", "<f16"], "offsets": [0, 4], "itemsize": 20}))
    values["n"], values["x"] = [1, 2, 3], LONG_VALUES[:3]
    _write_raw(f, "ld_record", rec, clear_long_padding(values))


def write_odd_numbers(f: h5py.File) -> None:
    """Numbers whose stored bytes are not numpy's: bfloat16 (2 bytes, h5py reads float32),
    a 12-bit unsigned at bit offset 4, a signed 31-bit integer, an unsigned 12-bit from bit 0."""
    bf16 = h5t.IEEE_F32LE.copy()
    bf16.set_fields(15, 7, 8, 0, 7)
    bf16.set_offset(0)
    bf16.set_precision(16)
    bf16.set_size(2)
    bf16.set_ebias(127)
    stored = (BF16_VALUES.view("<u4") >> 16).astype("<u2")  # the values are exact in bfloat16
    _write_raw(f, "bfloat16", bf16, stored)
    u12 = h5t.STD_U16LE.copy()
    u12.set_precision(12)
    u12.set_offset(4)
    _write_raw(f, "u12_offset4", u12, ((np.arange(100, dtype="<u2") * 37 % 4096) << 4).astype("<u2"))
    i31 = h5t.STD_I32LE.copy()
    i31.set_precision(31)
    values = np.array([-5, -1, 0, 1, 2**29, -(2**29)], dtype="<i4")
    _write_raw(f, "i31", i31, values & 0x7FFFFFFF)  # padding bit clear, as libhdf5 writes it
    u12_low = h5t.STD_U16LE.copy()
    u12_low.set_precision(12)
    _write_raw(f, "u12_low", u12_low, np.arange(100, dtype="<u2") * 37 % 4096)


def write_strings(f: h5py.File) -> None:
    """Fixed-length 8-byte strings of each padding, clean and with bytes libhdf5 clears, and a
    compound with a string member."""
    for name, (pad, data) in STRINGS.items():
        t = h5t.C_S1.copy()
        t.set_size(8)
        t.set_strpad(pad)
        _write_raw(f, name, t, np.array(data, dtype="S8"))
    t = h5t.C_S1.copy()
    t.set_size(8)
    t.set_strpad(h5t.STR_NULLTERM)
    rec = h5t.create(h5t.COMPOUND, 12)
    rec.insert(b"id", 0, h5t.STD_I32LE)
    rec.insert(b"name", 4, t)
    values = np.zeros(2, np.dtype([("id", "<i4"), ("name", "S8")]))
    values["id"], values["name"] = [7, 8], [b"ok\0\0\0\0\0\0", b"no\0tail!"]
    _write_raw(f, "record", rec, values)


def write_large_dirty_strings(path: str | os.PathLike, rows: int = 600_000) -> None:
    """4.8 MB of NULL-terminated strings with bytes after the terminator: past what is copied in
    by default, so the index keeps refindex's string codec (``portable`` copies it in)."""
    t = h5t.C_S1.copy()
    t.set_size(8)
    t.set_strpad(h5t.STR_NULLTERM)
    with h5py.File(path, "w") as f:
        _write_raw(f, "strings", t, np.array([b"x%d\0junk" % (i % 10) for i in range(rows)], dtype="S8"),
                   chunks=(65536,))


def write_datetimes(f: h5py.File) -> None:
    """numpy datetimes (h5py's opaque type) with a chunk never written: it reads as zero, not NaT."""
    t = h5py.opaque_dtype(np.dtype("M8[s]"))
    d = f.create_dataset("datetimes", shape=(10,), chunks=(5,), dtype=t)
    d[:5] = np.array(["2020-01-01T00:00:01"] * 5, dtype="M8[s]").astype(t)


def write_portability_zoo(path: str | os.PathLike) -> None:
    """Every case above in one file."""
    with h5py.File(path, "w") as f:
        for part in (write_long_doubles, write_odd_numbers, write_strings, write_datetimes):
            part(f.create_group(part.__name__.removeprefix("write_")))
