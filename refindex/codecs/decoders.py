"""Decode-only numcodecs codecs for HDF5 filter framings that have no stock numcodecs twin.

HDF5's LZF, LZ4 and bitshuffle filters wrap their payload in their own framing, so
the stock codecs cannot decode the stored chunk bytes.  These classes decode exactly
those framings with imagecodecs' primitives.  They are registered under the
``numcodecs.codecs`` entry point, so any environment that has refindex installed can
read indexes that use them through plain zarr.
"""

from __future__ import annotations

import struct

import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_bytes, ensure_contiguous_ndarray


def _out(buf, out):
    if out is None:
        return buf
    out_view = ensure_contiguous_ndarray(out).view("u1").reshape(-1)
    out_view[: len(buf)] = np.frombuffer(buf, dtype="u1")
    return out


class H5Lzf(Codec):
    """HDF5 LZF filter (id 32000): a bare LZF stream, uncompressed size known from the chunk."""

    codec_id = "refindex_h5lzf"

    def __init__(self, size: int):
        self.size = int(size)

    def decode(self, buf, out=None):
        import imagecodecs

        data = ensure_bytes(buf)
        if len(data) == self.size:  # the filter stores a chunk raw when LZF would grow it
            return _out(data, out)
        return _out(imagecodecs.lzf_decode(data, header=False, out=self.size), out)

    def encode(self, buf):
        import imagecodecs

        data = ensure_bytes(buf)
        comp = imagecodecs.lzf_encode(data, header=False)
        # decode() reads a chunk of exactly ``size`` bytes as raw: never emit such a stream.
        return data if len(comp) >= len(data) else comp


class H5Lz4(Codec):
    """HDF5 LZ4 filter (id 32004): 8-byte BE total size, 4-byte BE block size, then
    blocks each prefixed with a 4-byte BE compressed size (stored raw when equal)."""

    codec_id = "refindex_h5lz4"

    def __init__(self, blocksize: int = 0):
        self.blocksize = int(blocksize)

    def decode(self, buf, out=None):
        import imagecodecs

        data = ensure_bytes(buf)
        total, block = struct.unpack(">QI", data[:12])
        pos, parts, done = 12, [], 0
        while done < total:
            want = min(block, total - done)
            (n,) = struct.unpack(">I", data[pos : pos + 4])
            pos += 4
            piece = data[pos : pos + n]
            pos += n
            parts.append(piece if n == want else imagecodecs.lz4_decode(piece, header=False, out=want))
            done += want
        return _out(b"".join(parts), out)

    def encode(self, buf):
        import imagecodecs

        data = ensure_bytes(buf)
        block = self.blocksize or (1 << 30)
        out = [struct.pack(">QI", len(data), block)]
        for start in range(0, len(data), block):
            piece = data[start : start + block]
            comp = imagecodecs.lz4_encode(piece, header=False)
            if len(comp) >= len(piece):
                comp = piece
            out.append(struct.pack(">I", len(comp)) + comp)
        return b"".join(out)


def _default_bitshuffle_block(itemsize: int) -> int:
    # bitshuffle's default: 8 KiB worth of elements, a multiple of 8, at least 128.
    size = 8192 // itemsize
    size = (size // 8) * 8
    return max(size, 128)


class H5Bitshuffle(Codec):
    """HDF5 bitshuffle filter (id 32008), uncompressed, LZ4 or Zstd flavour.

    Compressed chunks start with an 8-byte BE total size and a 4-byte BE block size in
    bytes; each block is then a 4-byte BE compressed length and the compressed
    bit-shuffled block.  The trailing elements that do not fill a group of 8 are stored
    as they are.  Uncompressed chunks have no header.
    """

    codec_id = "refindex_h5bitshuffle"

    def __init__(self, itemsize: int, compression: int = 0, blocksize: int = 0, size: int = 0):
        self.itemsize = int(itemsize)
        self.compression = int(compression)
        self.blocksize = int(blocksize)
        self.size = int(size)

    def _unshuffle(self, data: bytes, block_elems: int) -> bytes:
        import imagecodecs

        return bytes(imagecodecs.bitshuffle_decode(data, itemsize=self.itemsize, blocksize=block_elems))

    def decode(self, buf, out=None):
        data = ensure_bytes(buf)
        isz = self.itemsize
        if self.compression == 0:
            total = self.size or len(data)
            block = self.blocksize or _default_bitshuffle_block(isz)
            return _out(self._blocks_raw(data[:total], block), out)
        import imagecodecs

        total, block_bytes = struct.unpack(">QI", data[:12])
        block = block_bytes // isz
        nelem = total // isz
        pos, parts, done = 12, [], 0
        full = nelem - nelem % 8
        while done < full:
            n_el = min(block, full - done)
            n_el -= n_el % 8
            (clen,) = struct.unpack(">I", data[pos : pos + 4])
            pos += 4
            comp = data[pos : pos + clen]
            pos += clen
            want = n_el * isz
            if self.compression == 2:
                raw = imagecodecs.lz4_decode(comp, header=False, out=want)
            elif self.compression == 3:
                raw = imagecodecs.zstd_decode(comp, out=want)
            else:
                raise ValueError(f"bitshuffle compression {self.compression} not supported")
            parts.append(self._unshuffle(bytes(raw), n_el))
            done += n_el
        parts.append(data[pos : pos + (nelem - full) * isz])
        return _out(b"".join(parts), out)

    def _blocks_raw(self, data: bytes, block: int) -> bytes:
        isz = self.itemsize
        nelem = len(data) // isz
        full = nelem - nelem % 8
        parts, done = [], 0
        while done < full:
            n_el = min(block, full - done)
            n_el -= n_el % 8
            parts.append(self._unshuffle(data[done * isz : (done + n_el) * isz], n_el))
            done += n_el
        parts.append(data[full * isz :])
        return b"".join(parts)

    def encode(self, buf):  # pragma: no cover - indexes are read-only
        raise NotImplementedError("refindex only decodes HDF5 bitshuffle chunks")


SZIP_CODEC_IDS = ("imagecodecs_szip", "refindex_h5szip")


def szip_shortfall(data: bytes, options_mask: int, pixels_per_block: int, bits_per_pixel: int,
                   pixels_per_scanline: int) -> tuple[int, int] | None:
    """(bytes decoded, bytes needed) when an HDF5 szip chunk's stream ends early, else None.

    libaec's szip layer (``SZ_BufftoBuffDecompress``) decodes scanlines whose length is not
    a whole number of blocks into a padded scratch buffer from ``malloc`` and reports the
    full size however few samples the stream held, so libhdf5 returns uninitialised memory for
    the rest of a damaged stream, and so did imagecodecs' ``szip_decode`` with ``header=True``
    (the stock ``imagecodecs_szip`` codec: a buffer of the header's size in every layout,
    whatever was decoded into it) until 2026.11.11 made it raise.  Those values differ from
    read to read.  Decoding the stream as scanlines of whole blocks (the same AEC parameters:
    block size, blocks per reference interval, sample size) into a buffer of the padded size
    takes the path that reports how much was decoded.  ``data`` is the chunk as the szip filter
    wrote it: a 4-byte LE size, then the stream.
    """
    import imagecodecs

    if pixels_per_block <= 0 or pixels_per_scanline <= 0 or len(data) < 4:
        return None
    bits = 8 if bits_per_pixel in (32, 64) else bits_per_pixel  # wide samples are coded as byte planes
    pixel = 4 if bits > 16 else 2 if bits > 8 else 1
    blocks = -(-pixels_per_scanline // pixels_per_block)  # per scanline: libaec's reference sample interval
    scanlines = -(-(int.from_bytes(data[:4], "little") // pixel) // pixels_per_scanline)
    need = blocks * pixels_per_block * pixel * scanlines
    if not need:
        return None
    try:
        got = len(imagecodecs.szip_decode(data[4:], options_mask, pixels_per_block, bits_per_pixel,
                                          blocks * pixels_per_block, header=False, out=need))
    except Exception:  # noqa: BLE001 - a stream libaec refuses: every reader refuses it too
        return None
    return (got, need) if got < need else None


class H5Szip(Codec):
    """HDF5 szip filter (id 4): 4-byte LE uncompressed size, then an AEC stream."""

    codec_id = "refindex_h5szip"

    def __init__(self, options_mask: int, pixels_per_block: int, bits_per_pixel: int, pixels_per_scanline: int):
        self.options_mask = int(options_mask)
        self.pixels_per_block = int(pixels_per_block)
        self.bits_per_pixel = int(bits_per_pixel)
        self.pixels_per_scanline = int(pixels_per_scanline)

    def decode(self, buf, out=None):
        import imagecodecs

        data = ensure_bytes(buf)
        raw = imagecodecs.szip_decode(
            data,
            options_mask=self.options_mask,
            pixels_per_block=self.pixels_per_block,
            bits_per_pixel=self.bits_per_pixel,
            pixels_per_scanline=self.pixels_per_scanline,
            header=True,
        )
        return _out(bytes(raw), out)

    def encode(self, buf):
        # Needed to re-encode chunks HDF5 stored with szip skipped (filter_mask != 0):
        # szip is an optional filter and libhdf5 stores a chunk raw when it does not shrink.
        import imagecodecs

        return bytes(imagecodecs.szip_encode(
            ensure_bytes(buf),
            options_mask=self.options_mask,
            pixels_per_block=self.pixels_per_block,
            bits_per_pixel=self.bits_per_pixel,
            pixels_per_scanline=self.pixels_per_scanline,
            header=True,
        ))


class H5StrPad(Codec):
    """What libhdf5 does to fixed-length strings on read, applied to the stored bytes.

    HDF5 strings are NULL-terminated, NULL-padded or space-padded.  h5py reads them as
    NULL-padded, so libhdf5 clears whatever follows the terminator (writers often leave
    garbage there) and turns trailing pad spaces into NULs.  ``fields`` lists
    ``[offset, size, pad]`` of every such string inside one element of ``itemsize``
    bytes (pad 0: NULL-terminated, 2: space-padded).
    """

    codec_id = "refindex_h5strpad"

    def __init__(self, itemsize: int, fields: list):
        self.itemsize = int(itemsize)
        self.fields = [[int(o), int(s), int(p)] for o, s, p in fields]

    def decode(self, buf, out=None):
        raw = np.frombuffer(ensure_bytes(buf), dtype="u1").copy()
        rows = raw.reshape(-1, self.itemsize)
        for off, size, pad in self.fields:
            seg = rows[:, off : off + size]
            if pad == 0:
                seg[np.cumsum(seg == 0, axis=1) > 0] = 0
            elif pad == 2:
                trailing = np.flip(np.cumprod(np.flip(seg == 0x20, axis=1), axis=1), axis=1).astype(bool)
                seg[trailing] = 0
        return _out(raw.tobytes(), out)

    def encode(self, buf):
        return ensure_bytes(buf)


class H5ByteSwap(Codec):
    """Reverse the bytes of chosen members of every record: a compound mixing byte orders read as one.

    A zarr v3 array states one byte order for its whole element (its ``bytes`` codec), while
    an HDF5 compound may mix little- and big-endian members.  Placed first after ``bytes``,
    this turns the big-endian members around, so the records read are all little-endian as
    the array's data type says.  ``fields`` lists ``[offset, unit, count]`` per member:
    ``count`` values of ``unit`` bytes from ``offset`` in each ``itemsize``-byte record (a
    complex number is two values, a UTF-32 string one per character).  Swapping is its own
    inverse, so encoding is decoding.  Used by zarr v3 indexes only (``refindex.codecs.zarr3``).
    """

    codec_id = "refindex_byteswap"

    def __init__(self, itemsize: int, fields: list):
        self.itemsize = int(itemsize)
        self.fields = [[int(o), int(u), int(n)] for o, u, n in fields]

    def decode(self, buf, out=None):
        raw = np.frombuffer(ensure_bytes(buf), dtype="u1").copy()
        if raw.size % self.itemsize:
            raise ValueError(f"{raw.size} bytes are not whole records of {self.itemsize} bytes")
        rows = raw.reshape(-1, self.itemsize)
        for off, unit, count in self.fields:
            part = rows[:, off : off + unit * count].reshape(len(rows), count, unit)
            part[...] = part[:, :, ::-1].copy()
        return _out(raw.tobytes(), out)

    def encode(self, buf):
        return self.decode(buf)


class H5B2nd(Codec):
    """HDF5 blosc2 filter (id 32026) chunks of two or more dimensions, decoded to the chunk's bytes.

    The filter stores a b2nd frame, which imagecodecs decodes to an array of opaque items;
    zarr v3's own ``imagecodecs_b2nd`` serializer hands that array on as it is and fails to
    store opaque items in a numeric chunk.  As a bytes-to-bytes step (the chunk's bytes in
    the file's byte order, as the ``bytes`` codec expects) it also follows other filters.
    Used by zarr v3 indexes only (``refindex.codecs.zarr3``); v2 indexes name ``imagecodecs_b2nd``.
    """

    codec_id = "refindex_b2nd"

    def decode(self, buf, out=None):
        import imagecodecs

        return _out(np.ascontiguousarray(imagecodecs.b2nd_decode(ensure_bytes(buf))).tobytes(), out)

    def encode(self, buf):  # pragma: no cover - indexes are read-only
        raise NotImplementedError("refindex only decodes HDF5 blosc2 chunks")
