"""HDF5 filter pipelines -> zarr codec configurations, and the string normalisation filter.

Can the stored chunk bytes be decoded by a codec zarr can run?  zarr applies filters in
order, then the compressor, when writing, and the reverse when reading, exactly like
HDF5's pipeline: the last HDF5 filter becomes the compressor.
"""

from __future__ import annotations

from collections.abc import Callable

import h5py
import numpy as np

DEFLATE, SHUFFLE, FLETCHER32, SZIP, NBIT, SCALEOFFSET = 1, 2, 3, 4, 5, 6
LZF, BLOSC, LZ4, BITSHUFFLE, BZIP2, ZSTD, BLOSC2 = 32000, 32001, 32004, 32008, 307, 32015, 32026

FILTER_NAMES = {
    DEFLATE: "gzip",
    SHUFFLE: "shuffle",
    FLETCHER32: "fletcher32",
    SZIP: "szip",
    NBIT: "nbit",
    SCALEOFFSET: "scaleoffset",
    LZF: "lzf",
    BLOSC: "blosc",
    LZ4: "lz4",
    BITSHUFFLE: "bitshuffle",
    BZIP2: "bzip2",
    ZSTD: "zstd",
    BLOSC2: "blosc2",
}


class NoCodec(Exception):
    """A filter in the pipeline has no codec zarr can run."""


def filter_list(dcpl) -> list[tuple[int, int, tuple[int, ...], str]]:
    """The dataset's filter pipeline as (id, flags, cd_values, name), in write order."""
    out = []
    for i in range(dcpl.get_nfilters()):
        fid, flags, cd, name = dcpl.get_filter(i)
        name = name.decode("ascii", "replace") if isinstance(name, bytes) else str(name)
        out.append((int(fid), int(flags), tuple(int(v) for v in cd), name))
    return out


def _codec_for(fid: int, cd: tuple[int, ...], itemsize: int, chunk_nbytes: int, chunk_ndim: int) -> dict:
    if fid == DEFLATE:
        return {"id": "zlib", "level": int(cd[0]) if cd else 4}
    if fid == SHUFFLE:
        return {"id": "shuffle", "elementsize": int(cd[0]) if cd else itemsize}
    if fid == FLETCHER32:
        return {"id": "fletcher32"}
    if fid == ZSTD:
        return {"id": "zstd", "level": int(cd[0]) if cd else 0}
    if fid == BZIP2:
        return {"id": "bz2", "level": int(cd[0]) if cd else 9}
    if fid == BLOSC:
        # cd: [filter_rev, blosc_version, typesize, bufsize, clevel, shuffle, compressor]
        cnames = {0: "blosclz", 1: "lz4", 2: "lz4hc", 3: "snappy", 4: "zlib", 5: "zstd"}
        return {
            "id": "blosc",
            "cname": cnames.get(cd[6] if len(cd) > 6 else 0, "blosclz"),
            "clevel": int(cd[4]) if len(cd) > 4 else 5,
            "shuffle": int(cd[5]) if len(cd) > 5 else 1,
            "blocksize": 0,
        }
    if fid == LZF:
        # imagecodecs' LZF decoder (no size header) sizes its output at 8x the input, so it
        # decodes a chunk only up to that ratio: ``lzf_within_stock_ratio`` checks the
        # stored sizes, and arrays beyond it use refindex's codec, told the chunk size.
        return {"id": "imagecodecs_lzf", "header": False}
    if fid == LZ4:
        # The HDF5 LZ4 framing (sizes, blocks, raw blocks) is exactly imagecodecs' lz4h5.
        return {"id": "imagecodecs_lz4h5"}
    if fid == BITSHUFFLE:
        # cd: [major, minor, elem_size, block_size, compression(0 none, 2 lz4, 3 zstd), level]
        elem = int(cd[2]) if len(cd) > 2 and cd[2] else itemsize
        return {
            "id": "refindex_h5bitshuffle",
            "itemsize": elem,
            "compression": int(cd[4]) if len(cd) > 4 else 0,
            "blocksize": int(cd[3]) if len(cd) > 3 else 0,
            "size": chunk_nbytes,
        }
    if fid == SZIP:
        # cd as stored by libhdf5: [options_mask, pixels_per_block, bits_per_pixel, pixels_per_scanline];
        # chunks are a 4-byte LE size then the AEC stream: imagecodecs' szip with its header.
        if len(cd) < 4:
            raise NoCodec("szip filter without its parameters")
        return {
            "id": "imagecodecs_szip",
            "options_mask": cd[0],
            "pixels_per_block": cd[1],
            "bits_per_pixel": cd[2],
            "pixels_per_scanline": cd[3],
        }
    if fid == BLOSC2 and chunk_ndim >= 2:
        # hdf5-blosc2 writes a b2nd frame for chunks of two or more dimensions (1-D chunks
        # get a plain super-chunk frame no stock codec reads).
        return {"id": "imagecodecs_b2nd"}
    name = FILTER_NAMES.get(fid, f"filter {fid}")
    raise NoCodec(f"no zarr codec for HDF5 {name} (filter id {fid})")


def pipeline(filters, itemsize: int, chunk_nbytes: int, chunk_ndim: int = 1,
             *, stock: Callable[[str], bool] | None = None) -> tuple[list[dict] | None, dict | None]:
    """Map an HDF5 pipeline (write order) to zarr v2 ``(filters, compressor)``.

    zarr applies filters in order then the compressor when writing and the reverse when
    reading, exactly like HDF5's pipeline, so the last HDF5 filter becomes the
    compressor and the others stay filters in the same order.  ``stock`` (a portable index:
    its format's ``stock_codec``): a pipeline with a codec that its readers lack is :class:`NoCodec`
    (the caller inlines values).
    """
    codecs = [_codec_for(fid, cd, itemsize, chunk_nbytes, chunk_ndim) for fid, _flags, cd, _name in filters]
    if not codecs:
        return None, None
    if codecs[-1]["id"] == "refindex_h5bitshuffle" and codecs[-1]["compression"] == 0:
        # Uncompressed bitshuffle last: imagecodecs' bitshuffle decodes it, given an array of
        # items of the right size (it takes the item size from an ndarray input); numcodecs'
        # astype, as the compressor, hands it the stored bytes viewed that way.
        c = codecs.pop()
        view = {1: "|u1", 2: "<u2", 4: "<u4", 8: "<u8"}.get(c["itemsize"], f"|V{c['itemsize']}")
        codecs += [{"id": "imagecodecs_bitshuffle", "itemsize": c["itemsize"], "blocksize": c["blocksize"]},
                   {"id": "astype", "encode_dtype": view, "decode_dtype": view}]
    if stock is not None:
        own = [c["id"] for c in codecs if not stock(c["id"])]
        if own:
            if own[0].startswith("refindex_"):
                raise NoCodec(f"only refindex's own codec {own[0]} decodes its stored chunks")
            raise NoCodec(f"in zarr v3 only refindex's own codec decodes what {own[0]} decodes in v2")
    return (codecs[:-1] or None), codecs[-1]


def lzf_within_stock_ratio(compressor: dict | None, sizes, chunk_nbytes: int) -> bool:
    """Can the stock LZF decoder (output sized 8x its input) decode every chunk of these sizes?"""
    if not compressor or compressor.get("id") != "imagecodecs_lzf":
        return True
    sizes = np.asarray(sizes, dtype=np.uint64)
    return not len(sizes) or bool((sizes * np.uint64(8) >= np.uint64(chunk_nbytes)).all())


def refindex_lzf(chunk_nbytes: int) -> dict:
    """refindex's LZF decoder, for arrays with chunks compressed beyond the stock decoder's 8x."""
    return {"id": "refindex_h5lzf", "size": chunk_nbytes}


def string_padding(tid) -> dict | None:
    """A ``refindex_h5strpad`` filter for types holding fixed strings h5py normalises.

    Only NULL-terminated strings longer than one byte and space-padded strings are
    affected; NULL-padded strings are read as stored.
    """
    fields: list[list[int]] = []

    def walk(t, base: int) -> None:
        if isinstance(t, h5py.h5t.TypeStringID) and not t.is_variable_str():
            pad = t.get_strpad()
            size = t.get_size()
            if (pad == h5py.h5t.STR_NULLTERM and size > 1) or pad == h5py.h5t.STR_SPACEPAD:
                fields.append([base, size, 0 if pad == h5py.h5t.STR_NULLTERM else 2])
        elif isinstance(t, h5py.h5t.TypeCompoundID):
            for i in range(t.get_nmembers()):
                walk(t.get_member_type(i), base + t.get_member_offset(i))
        elif isinstance(t, h5py.h5t.TypeArrayID):
            sup = t.get_super()
            n = int(np.prod(t.get_array_dims()))
            for i in range(n):
                walk(sup, base + i * sup.get_size())

    walk(tid, 0)
    if not fields:
        return None
    return {"id": "refindex_h5strpad", "itemsize": tid.get_size(), "fields": fields}
