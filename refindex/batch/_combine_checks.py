"""What one zarr array can hold, and what xarray would see differently: the combine's refusals.

Each file's digest is compared with the first one's as it arrives.  One zarr array has one
shape on the axes it is not concatenated along, one chunk shape, one dtype, one codec
pipeline and one fill value; xarray decodes each file with its own attributes, so the
attributes decoding depends on (scale, offset, fill values, time units and calendars) must
agree too, or the combined dataset would read other values than the files do.  Coordinates
not along the concat dimension are compared by value.  A refusal names both files and the
difference.
"""

from __future__ import annotations

from typing import Any

from ..errors import RefindexError
from ._combine_digest import FileDigest, coordinate_names

# The attributes xarray's default decoding reads to turn stored numbers into values.
DECODING = ("scale_factor", "add_offset", "_FillValue", "missing_value", "_Unsigned", "dtype", "calendar",
            "_Encoding", "coordinates")
TIME_UNITS = ("days", "hours", "minutes", "seconds", "milliseconds", "microseconds", "nanoseconds")
ARRAY_FIELDS = ("dtype", "compressor", "filters", "fill_value", "order")


def refuse(a: FileDigest, b: FileDigest, what: str) -> RefindexError:
    return RefindexError(f"cannot combine {a.source} and {b.source}: {what}")


def decoding_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    out = {k: attrs[k] for k in DECODING if k in attrs}
    units = attrs.get("units")
    if isinstance(units, str) and (" since " in units or units.strip() in TIME_UNITS):
        out["units"] = units
    return out


def same(x: Any, y: Any) -> bool:
    """Equal, NaN equal to NaN (fill values and attributes come from JSON)."""
    if isinstance(x, float) and isinstance(y, float) and x != x and y != y:
        return True
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(same(i, j) for i, j in zip(x, y))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    return type(x) is type(y) and bool(x == y)


def check_names(ref: FileDigest, d: FileDigest) -> None:
    for name in sorted(set(ref.zarrays) ^ set(d.zarrays)):
        has, lacks = (ref, d) if name in ref.zarrays else (d, ref)
        raise refuse(ref, d, f"variable {name!r} is in {has.source} but missing from {lacks.source}")
    if coordinate_names(ref.zattrs, ref.attrs) != coordinate_names(d.zattrs, d.attrs):
        raise refuse(ref, d, "the files name different coordinates (their 'coordinates' attributes differ)")


def check_array(ref: FileDigest, d: FileDigest, name: str, dim: str) -> None:
    """One array of ``d`` against the same array of the first file."""
    a, b = ref.zarrays[name], d.zarrays[name]
    dims_a, dims_b = ref.dims(name), d.dims(name)
    if dims_a != dims_b:
        raise refuse(ref, d, f"variable {name!r} has dimensions {dims_a} vs {dims_b}")
    if name == dim:
        return  # the concat coordinate is decoded per file and encoded anew (see _combine_times)
    for f in ARRAY_FIELDS:
        if not same(a.get(f), b.get(f)):
            what = {"compressor": "codec", "filters": "filters", "fill_value": "fill value"}.get(f, f)
            raise refuse(ref, d, f"variable {name!r}: {what} {a.get(f)!r} vs {b.get(f)!r} "
                                 "(one zarr array has one)")
    axis = dims_a.index(dim) if dim in dims_a else None
    other_a = [s for i, s in enumerate(a["shape"]) if i != axis]
    other_b = [s for i, s in enumerate(b["shape"]) if i != axis]
    if other_a != other_b:
        raise refuse(ref, d, f"variable {name!r}: shape {tuple(a['shape'])} vs {tuple(b['shape'])} "
                             f"on dimensions other than {dim!r} (unequal grids)")
    if list(a["chunks"]) != list(b["chunks"]):
        raise refuse(ref, d, f"variable {name!r}: chunk shape {tuple(a['chunks'])} vs {tuple(b['chunks'])} "
                             "(one zarr array has one chunk shape)")
    dec_a, dec_b = decoding_attrs(ref.zattrs[name]), decoding_attrs(d.zattrs[name])
    if axis is not None and not same(dec_a, dec_b):
        raise refuse(ref, d, f"variable {name!r}: attributes xarray decodes with differ: {dec_a} vs {dec_b}")
    if name in ref.hashes and (ref.hashes[name] != d.hashes.get(name) or not same(dec_a, dec_b)):
        raise refuse(ref, d, f"coordinate {name!r} has other values (unequal grids; xarray would not "
                             "concatenate these files into one grid)")


def length_along(d: FileDigest, dim: str) -> int:
    """The file's size of ``dim``; every array along it must agree."""
    sizes = {n: za["shape"][d.dims(n).index(dim)] for n, za in d.zarrays.items() if dim in d.dims(n)}
    if not sizes:
        raise RefindexError(f"no variable has the dimension {dim!r} to concatenate along "
                            f"(arrays need _ARRAY_DIMENSIONS; netCDF-4 files have them)", file=d.source)
    if len(set(sizes.values())) > 1:
        raise RefindexError(f"variables disagree on the size of {dim!r}: {sizes}", file=d.source)
    n = next(iter(sizes.values()))
    if n == 0:
        raise RefindexError(f"the file holds no step along {dim!r}", file=d.source)
    return n


def missing_steps(d: FileDigest, dim: str, raw: Any) -> bool:
    """Steps equal to the coordinate's fill value: xarray reads them as missing (NaT), which one
    re-encoded coordinate would not say."""
    import numpy as np

    fills = [d.zarrays[dim].get("fill_value")] + [d.zattrs[dim].get(k) for k in ("_FillValue", "missing_value")]
    for fill in fills:
        if isinstance(fill, (int, float)) and not isinstance(fill, bool) and np.any(raw == fill):
            return True
    return False
