"""The zarr format 3 codec chain of an array, from the v2 codec configurations the scanner chose.

Both formats describe the same stored bytes, so a v3 chain is a translation: the v2
pipeline order (filters, then the compressor) is the encode order, which is v3's order of
bytes-to-bytes codecs after the array-to-bytes one (``bytes`` with the byte order, or
``vlen-utf8``/``vlen-bytes`` for text).  Each name is one a zarr 3.4 reader resolves:

* numcodecs codecs under zarr's own ``numcodecs.*`` wrappers (a fixed list of 21 names;
  ``numcodecs.zlib`` for HDF5 deflate, which is a zlib stream, not gzip);
* imagecodecs' zarr v3 codecs (``imagecodecs_lzf``, ``imagecodecs_lz4h5``,
  ``imagecodecs_szip``), which a reader registers with ``imagecodecs.zarr.register_codecs()``
  or gets from the ``imagecodecs-zarr`` package's entry points;
* refindex's own (``numcodecs.refindex_*``, :mod:`refindex.codecs.zarr3`) only where no
  stock v3 codec reads the bytes.  Two v2 choices have no stock v3 twin: uncompressed
  bitshuffle (v2: ``imagecodecs_bitshuffle`` fed by ``astype``; imagecodecs' v3 bitshuffle
  takes the item size from a byte array and cannot), and blosc2's b2nd frames (imagecodecs'
  v3 serializer returns opaque items zarr cannot store).
"""

from __future__ import annotations

import json
from typing import Any, Iterable

import numpy as np

# v2 id -> (v3 name, configuration keys kept).  Only ids refindex writes; anything else is refused.
V3_NAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "zlib": ("numcodecs.zlib", ("level",)),
    "gzip": ("numcodecs.gzip", ("level",)),
    "shuffle": ("numcodecs.shuffle", ("elementsize",)),
    "fletcher32": ("numcodecs.fletcher32", ()),
    "zstd": ("numcodecs.zstd", ("level", "checksum")),
    "bz2": ("numcodecs.bz2", ("level",)),
    "blosc": ("numcodecs.blosc", ("cname", "clevel", "shuffle", "blocksize", "typesize")),
    "lz4": ("numcodecs.lz4", ("acceleration",)),
    "imagecodecs_lzf": ("imagecodecs_lzf", ("header",)),
    "imagecodecs_lz4h5": ("imagecodecs_lz4h5", ()),
    "imagecodecs_szip": ("imagecodecs_szip", ("options_mask", "pixels_per_block", "bits_per_pixel",
                                              "pixels_per_scanline", "header")),
    "imagecodecs_b2nd": ("numcodecs.refindex_b2nd", ()),
    "refindex_h5lzf": ("numcodecs.refindex_h5lzf", ("size",)),
    "refindex_h5bitshuffle": ("numcodecs.refindex_h5bitshuffle", ("itemsize", "compression", "blocksize", "size")),
    "refindex_h5strpad": ("numcodecs.refindex_h5strpad", ("itemsize", "fields")),
}
# Object (|O) arrays: the v2 object codec -> (v3 data type, v3 array-to-bytes codec)
OBJECT_CODECS: dict[str, tuple[str, dict[str, Any]]] = {
    "vlen-utf8": ("string", {"name": "vlen-utf8", "configuration": {}}),
    "vlen-bytes": ("variable_length_bytes", {"name": "vlen-bytes", "configuration": {}}),
}
# v2 codecs that are stock in v2 but whose v3 form is refindex's own (see the module docstring)
NOT_STOCK_IN_V3 = frozenset({"imagecodecs_bitshuffle", "astype", "imagecodecs_b2nd"})
BYTESWAP = "numcodecs.refindex_byteswap"


def dtype_of(description: Any) -> np.dtype:
    """The numpy dtype of a zarr v2 dtype description (a type string, or a list of ``[name, description]``
    fields, as :func:`refindex.codecs.descr` writes them)."""
    if isinstance(description, str):
        return np.dtype(description)
    fields = []
    for f in description:
        if len(f) != 2:
            raise ValueError(f"structured field {f!r} with a shape (refindex writes sub-arrays as records)")
        fields.append((str(f[0]), dtype_of(f[1])))
    return np.dtype(fields)


class NoV3Codec(Exception):
    """The array's v2 pipeline has no zarr v3 codec chain refindex knows."""


def bytes_codec(v2: dict[str, Any]) -> dict[str, Any]:
    """One v2 filter/compressor configuration as a v3 bytes-to-bytes codec."""
    cid = v2.get("id")
    if cid not in V3_NAMES:
        raise NoV3Codec(f"codec {cid!r} has no zarr v3 form known to refindex")
    name, keys = V3_NAMES[cid]
    unknown = set(v2) - set(keys) - {"id"}
    if unknown:
        raise NoV3Codec(f"codec {cid!r} with unexpected parameters {sorted(unknown)}")
    return {"name": name, "configuration": {k: v2[k] for k in keys if k in v2}}


def v3_chain(filters: list[dict] | None, compressor: dict | None, chunk_nbytes: int) -> list[dict[str, Any]]:
    """The bytes-to-bytes codecs (after the array-to-bytes one) of a v2 ``filters`` + ``compressor``.

    The v2 pair ``imagecodecs_bitshuffle`` + ``astype`` (uncompressed bitshuffle) becomes
    ``numcodecs.refindex_h5bitshuffle`` (``chunk_nbytes``: bytes of one decoded chunk).
    """
    chain = [dict(c) for c in (filters or [])] + ([dict(compressor)] if compressor else [])
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(chain):
        c = chain[i]
        if c.get("id") == "imagecodecs_bitshuffle":
            after = chain[i + 1] if i + 1 < len(chain) else None
            if after is None or after.get("id") != "astype" or i + 2 != len(chain):
                raise NoV3Codec("imagecodecs_bitshuffle not followed by astype as the last codec")
            out.append({"name": "numcodecs.refindex_h5bitshuffle", "configuration": {
                "itemsize": int(c.get("itemsize", 1)), "compression": 0, "blocksize": int(c.get("blocksize", 0)),
                "size": int(chunk_nbytes)}})
            i += 2
            continue
        out.append(bytes_codec(c))
        i += 1
    return out


# zarr format 3 codecs zarr itself provides (its array-to-bytes codecs)
ZARR_V3 = frozenset({"bytes", "vlen-utf8", "vlen-bytes"})


def codec_provider_v3(name: str) -> str:
    """"zarr" (``bytes``, ``vlen-utf8``), "numcodecs", "imagecodecs", "refindex" or "unknown" for a codec
    name in a v3 index (``numcodecs.<id>`` is <id>'s provider)."""
    from ._catalog import codec_provider

    if name in ZARR_V3:
        return "zarr"
    if not name.startswith("numcodecs."):
        return "imagecodecs" if name.startswith("imagecodecs_") else "unknown"
    codec_id = name[len("numcodecs."):]
    if codec_id.startswith("imagecodecs_"):
        return "unknown"  # zarr wraps no imagecodecs id under numcodecs.
    return codec_provider(codec_id)


def stock_in_v3(codec_id: str) -> bool:
    """Does a reader of a v3 index decode this v2 codec id with numcodecs/imagecodecs alone?"""
    from ._catalog import stock

    return stock(codec_id) and codec_id not in NOT_STOCK_IN_V3


def codec_names(docs: Iterable[dict[str, Any]]) -> list[str]:
    """The sorted v3 codec names of these array ``zarr.json`` documents."""
    names: set[str] = set()
    for doc in docs:
        for c in doc.get("codecs") or []:
            if isinstance(c, dict) and isinstance(c.get("name"), str):
                names.add(c["name"])
    return sorted(names)


_registered: set[str] = set()


def register_v3_codecs(*, imagecodecs: bool = True) -> None:
    """Make every v3 name refindex writes known to zarr here: imagecodecs' v3 codecs (a reader's
    ``imagecodecs.zarr.register_codecs()``) and refindex's own (their entry points' job when installed).

    ``imagecodecs=False``: refindex's own only (importing ``imagecodecs.zarr`` costs ~0.1 s, which
    the scan-time check skips for arrays that name no imagecodecs codec)."""
    if "refindex" not in _registered:
        from .zarr3 import register

        register()
        _registered.add("refindex")
    if imagecodecs and "imagecodecs" not in _registered:
        import imagecodecs.zarr

        imagecodecs.zarr.register_codecs(verbose=False)
        _registered.add("imagecodecs")


_verdicts: dict[str, str | None] = {}


def zarr_refusal_v3(doc: dict[str, Any]) -> str | None:
    """Why zarr would not open an array with this ``zarr.json`` (None: it opens it).

    zarr's own parser decides (data type, fill value, every codec name resolved), and each
    numcodecs-wrapped codec is built from its configuration (zarr builds those only on the
    first chunk decoded).  Verdicts are kept per document, shapes aside.
    """
    key = json.dumps({k: v for k, v in doc.items() if k not in ("shape", "chunk_grid", "attributes",
                                                                "dimension_names")} | {"ndim": len(doc["shape"])},
                     sort_keys=True, default=str)
    if key not in _verdicts:
        from zarr.codecs.numcodecs import _NumcodecsCodec
        from zarr.core.metadata.v3 import ArrayV3Metadata

        # imagecodecs' names (and any name no other provider knows, which it might) need its registration
        register_v3_codecs(imagecodecs=any(codec_provider_v3(c) not in ("zarr", "numcodecs", "refindex")
                                           for c in codec_names([doc])))
        ndim = len(doc["shape"])
        probe = dict(doc, shape=[1] * ndim, attributes={},
                     chunk_grid={"name": "regular", "configuration": {"chunk_shape": [1] * ndim}})
        probe.pop("dimension_names", None)
        try:
            meta = ArrayV3Metadata.from_dict(probe)
            for codec in meta.codecs:
                if isinstance(codec, _NumcodecsCodec):
                    getattr(codec, "_codec")  # zarr builds it lazily: a bad configuration fails here
            _verdicts[key] = None
        except Exception as e:  # noqa: BLE001 - any refusal is the answer
            _verdicts[key] = f"{type(e).__name__}: {e}".splitlines()[0]
    return _verdicts[key]
