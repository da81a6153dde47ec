"""refindex's decode-only codecs as zarr format 3 codecs, named ``numcodecs.refindex_*``.

zarr 3.4 resolves a v3 codec name only through its own registry (``register_codec`` or
``zarr.codecs`` entry points), and its ``numcodecs.*`` wrappers are a fixed list of 21
names: ``numcodecs.refindex_h5lzf`` is not found even where numcodecs knows
``refindex_h5lzf``.  Since zarr parses every array of a group's consolidated metadata when
the group opens, one name it cannot resolve makes the whole index unopenable.

So each codec a v3 index may name that no stock package provides is a bytes-to-bytes class
here, named ``numcodecs.<id>`` (the ``numcodecs.`` prefix is what zarr's numcodecs wrapper
expects), configured as its numcodecs twin without ``id``.  It runs refindex's own class
directly (never looked up in numcodecs' registry), so a v3 reader needs exactly these
classes' ``zarr.codecs`` entry points, or :func:`register` in the process.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

from zarr.codecs.numcodecs import _NumcodecsBytesBytesCodec

from . import decoders


class _RefindexV3Codec(_NumcodecsBytesBytesCodec):
    """A v3 bytes-to-bytes codec running one of refindex's numcodecs classes."""

    numcodec: ClassVar[type]

    @cached_property
    def _codec(self) -> Any:
        return self.numcodec(**{k: v for k, v in self.codec_config.items() if k != "id"})


class H5Lzf(_RefindexV3Codec, codec_name="refindex_h5lzf"):
    """HDF5 LZF chunks compressed beyond the stock decoder's 8x (bare stream, chunk size known)."""

    numcodec = decoders.H5Lzf


class H5Bitshuffle(_RefindexV3Codec, codec_name="refindex_h5bitshuffle"):
    """HDF5 bitshuffle filter, uncompressed, LZ4 or Zstd flavour, any element count."""

    numcodec = decoders.H5Bitshuffle


class H5StrPad(_RefindexV3Codec, codec_name="refindex_h5strpad"):
    """libhdf5's read-side clean-up of NULL-terminated and space-padded fixed-length strings."""

    numcodec = decoders.H5StrPad


class ByteSwap(_RefindexV3Codec, codec_name="refindex_byteswap"):
    """Compounds mixing byte orders, read as little-endian records (:class:`decoders.H5ByteSwap`)."""

    numcodec = decoders.H5ByteSwap


class B2nd(_RefindexV3Codec, codec_name="refindex_b2nd"):
    """HDF5 blosc2 b2nd frames as the chunk's bytes (:class:`decoders.H5B2nd`)."""

    numcodec = decoders.H5B2nd


CLASSES: dict[str, type] = {cls.codec_name: cls for cls in (H5Lzf, H5Bitshuffle, H5StrPad, ByteSwap, B2nd)}

_registered = False


def register() -> None:
    """Make the ``numcodecs.refindex_*`` names known to zarr in this process (idempotent)."""
    global _registered
    if _registered:
        return
    from zarr.registry import register_codec

    for name, cls in CLASSES.items():
        register_codec(name, cls)
    _registered = True
