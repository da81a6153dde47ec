"""HDF5 filters and datatypes -> zarr: codec configurations, dtype plans, values as JSON, and the
decode-only codec classes for HDF5 framings with no stock twin (:mod:`refindex.codecs.decoders`), and
the zarr format 3 names of it all (:mod:`refindex.codecs.zarr3` holds refindex's v3 codec classes).

Names load on first use, so numcodecs can import :mod:`refindex.codecs.decoders` (its entry
points) without h5py.
"""

from __future__ import annotations

from ..lazy import attribute_loader

_WHERE = {
    "FILTER_NAMES": "_filters", "NoCodec": "_filters", "filter_list": "_filters", "pipeline": "_filters",
    "string_padding": "_filters", "lzf_within_stock_ratio": "_filters", "refindex_lzf": "_filters",
    "codec_pipeline": "_runtime", "encode_chunk": "_runtime", "register_codecs": "_runtime",
    "DTypePlan": "_dtypes", "descr": "_dtypes", "dtype_of": "_v3", "stored_as_numpy": "_dtypes", "describe_number_type": "_dtypes",
    "holds_zarr_lacks": "_longdouble", "view_dtype_attr": "_dtypes", "clear_long_padding": "_longdouble", "packed_dtype": "_dtypes", "plan_dtype": "_dtypes",
    "codec_ids": "_catalog", "codec_provider": "_catalog", "stock": "_catalog", "register_stock_codecs": "_runtime",
    "zarr_refusal": "_catalog",
    "fill_value_json": "_values", "jsonable": "_values", "lost_type": "_values",
    "vlen_items": "_vlen", "vlen_chunk_items": "_vlen", "v2_pipeline": "_vlen",
    "NoV3Codec": "_v3", "v3_chain": "_v3", "codec_names": "_v3", "zarr_refusal_v3": "_v3",
    "register_v3_codecs": "_v3", "stock_in_v3": "_v3", "codec_provider_v3": "_v3", "OBJECT_CODECS": "_v3", "V3_NAMES": "_v3",
    "BYTESWAP": "_v3",
    "H5Bitshuffle": "decoders", "H5ByteSwap": "decoders", "H5B2nd": "decoders", "H5Lz4": "decoders", "H5Lzf": "decoders", "H5StrPad": "decoders",
    "H5Szip": "decoders", "SZIP_CODEC_IDS": "decoders", "szip_shortfall": "decoders",
}
__all__ = sorted(_WHERE)


__getattr__ = attribute_loader(__name__, _WHERE)
