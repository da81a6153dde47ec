"""Running codec pipelines in this process: refindex's codecs registered, chunks encoded."""

from __future__ import annotations

from typing import Any

import numcodecs  # every scan decodes or encodes a few chunks with it
import numpy as np

def codec_pipeline(filters: list[dict] | None, compressor: dict | None):
    """numcodecs objects for re-encoding inline chunks with an array's pipeline."""
    from numcodecs.registry import codec_registry

    if any(c.get("id") not in codec_registry for c in [*(filters or []), *([compressor] if compressor else [])]):
        register_codecs()  # imagecodecs' import (~15 ms) only for pipelines numcodecs alone cannot run
        register_stock_codecs()
    chain = [numcodecs.get_codec(dict(c)) for c in (filters or [])]
    if compressor:
        chain.append(numcodecs.get_codec(dict(compressor)))
    return chain


_registered = False


def register_codecs() -> None:
    """Make refindex's HDF5-framing codecs known to numcodecs in this process."""
    global _registered
    if _registered:
        return
    from .decoders import H5Bitshuffle, H5Lz4, H5Lzf, H5StrPad, H5Szip

    for cls in (H5Lzf, H5Lz4, H5Bitshuffle, H5Szip, H5StrPad):
        numcodecs.register_codec(cls)
    _registered = True


_stock_registered = False


def register_stock_codecs() -> None:
    """Make imagecodecs' numcodecs codecs known in this process (imagecodecs ships no entry points)."""
    global _stock_registered
    if _stock_registered:
        return
    import imagecodecs.numcodecs

    imagecodecs.numcodecs.register_codecs(verbose=False)
    _stock_registered = True



def encode_chunk(data: np.ndarray, filters: list[dict] | None, compressor: dict | None) -> bytes:
    buf: Any = np.ascontiguousarray(data)
    for codec in codec_pipeline(filters, compressor):
        buf = codec.encode(buf)
    return bytes(buf) if not isinstance(buf, bytes) else buf
