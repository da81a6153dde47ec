"""What a netCDF user sees: xarray with default decoding over an HDF5 file (h5netcdf) and over its index.

``differences(want, got)`` lists everything that differs between two ``xarray.Dataset``s
as a user meets it: dimensions and their sizes, which variables are coordinates and which
data, each variable's dimensions, dtype, attributes, missing-value mask (NaN / NaT
positions) and values, and the dataset's attributes.  Nothing is compared with
``decode_cf=False``: masks, scaling, time decoding and ``coordinates`` handling are what
users get, so they are what is compared.

One difference is accepted (issue 21): JSON has no float32, so a variable packed with a
float32 ``scale_factor``/``add_offset`` decodes as float64 from any zarr store; its values
equal h5netcdf's once cast to float32, or with an ``add_offset`` differ by one float32 unit in
the last place (xarray's float32 arithmetic over the file rounds twice, float64 once).  Attribute numbers are compared by value in
h5netcdf's type (JSON holds no numpy widths); a scalar must stay a scalar and an array an
array of the same length, text must stay text.

``h5netcdf_groups(path)`` names the groups h5netcdf itself opens; ``open_file`` and
``open_reference`` open one group of a file, or of an index through the kerchunk route
(``"reference://"``, ``engine="zarr"``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from corpus import MANY_CHUNKS, chunk_count

# variables of more elements, or of more than MANY_CHUNKS chunks (jhdf's file has 120,000: test_corpus
# compares every chunk's values, and xarray decodes every chunk of a variable alike), are compared on a
# leading and a trailing block
WHOLE = 1 << 22
EDGE = 256


def quiet() -> warnings.catch_warnings:
    """xarray and zarr warn about things both sides share (e.g. a variable's name equal to a dimension's)."""
    w = warnings.catch_warnings()
    w.__enter__()
    warnings.simplefilter("ignore")
    return w


def open_file(path: Any, group: str | None = None) -> Any:
    import xarray as xr

    with names_found_once():
        return xr.open_dataset(path, engine="h5netcdf", group=group)


@contextlib.contextmanager
def names_found_once() -> Iterator[None]:
    """h5netcdf names a variable's dimensions by the names of the scales its ``DIMENSION_LIST``
    references; libhdf5 finds the name of an object opened by reference by searching the whole file
    (9 ms each in netcdf-c's file of 2,000 variables, asked 4,000 times for its one scale: 27 of the
    37 s h5netcdf took to open it).  The same object of the same open file is found at the same path
    each time, so its first answer is kept while h5netcdf opens a file: the same names, sooner.
    Likewise h5netcdf opens a variable by its path for each property it asks (23 times a variable):
    the object a path names in a file open for reading is opened once."""
    import h5py

    found: dict[Any, str] = {}
    by_path: dict[tuple[Any, str], Any] = {}
    kinds: dict[type, type] = {}
    get = h5py.Group.__getitem__

    def named_once(cls: type) -> type:
        if cls not in kinds:
            def name(self: Any) -> str:
                if self.id not in found:  # an ObjectID is equal to another of the same object and file
                    found[self.id] = super(kinds[cls], self).name
                return found[self.id]
            kinds[cls] = type(cls.__name__, (cls,), {"name": property(name), "__module__": cls.__module__})
        return kinds[cls]

    def getitem(self: Any, name: Any) -> Any:
        if isinstance(name, str):  # h5netcdf opens each variable by its path again for every property
            key = (self.id, name)
            if key not in by_path:
                by_path[key] = get(self, name)
            return by_path[key]
        obj = get(self, name)
        if isinstance(name, h5py.Reference) and type(obj) in (h5py.Dataset, h5py.Group):
            obj.__class__ = named_once(type(obj))
        return obj

    h5py.Group.__getitem__ = getitem
    try:
        yield
    finally:
        h5py.Group.__getitem__ = get


def open_reference(refs: Any, group: str | None = None, **storage: Any) -> Any:
    """xarray over an index (a dict or a path) as the kerchunk recipe opens it, default decoding."""
    import xarray as xr

    return xr.open_dataset("reference://", engine="zarr", group=group,
                           backend_kwargs={"storage_options": {"fo": refs, **storage}})


def open_engine(refs: Any, group: str | None = None, **options: Any) -> Any:
    """xarray over an index through refindex's backend (``engine="refindex"``), default decoding."""
    import xarray as xr

    return xr.open_dataset(refs, engine="refindex", group=group, check_source=False, **options)


def h5netcdf_groups(path: Any) -> list[str]:
    """"/" and every group below it, as h5netcdf walks them (groups it cannot open are left out)."""
    import h5netcdf

    out: list[str] = []

    def walk(g: Any, name: str) -> None:
        out.append(name)
        for child in g.groups:
            try:
                walk(g.groups[child], name.rstrip("/") + "/" + child)
            except Exception:  # noqa: BLE001 - a group h5netcdf cannot open is not compared
                pass

    with h5netcdf.File(path, "r") as f:
        walk(f, "/")
    return out


# ---------------------------------------------------------------- the comparison


def differences(want: Any, got: Any, where: str = "", values: Any = None) -> list[str]:
    """Every difference a user of ``got`` would meet, compared with ``want`` (empty: identical);
    ``values``: the names whose values are compared (default: every variable's; the rest are
    compared on everything but their values)."""
    out: list[str] = []
    at = f"{where}: " if where else ""
    if dict(want.sizes) != dict(got.sizes):
        out.append(f"{at}dimensions {dict(got.sizes)} != {dict(want.sizes)}")
    for kind, a, b in (("coordinates", want.coords, got.coords), ("data variables", want.data_vars, got.data_vars)):
        if set(a) != set(b):
            out.append(f"{at}{kind}: missing {sorted(set(a) - set(b))}, extra {sorted(set(b) - set(a))}")
    out += attr_differences(want.attrs, got.attrs, f"{at}dataset attributes")
    for name in want.variables:
        if name in got.variables:
            out += variable_differences(want.variables[name], got.variables[name], f"{at}{name}",
                                        values is None or name in values)
    return out


def load_whole(ds: Any) -> Any:
    """``ds`` with the variables :func:`differences` compares whole read into memory, once: a file's
    view compared with several indexes' views is read once, not once per index (those xarray
    cannot decode stay lazy, to fail where they are compared)."""
    for v in ds.variables.values():
        if blocks_compared(v) is None:
            try:
                v.load()
            except Exception:  # noqa: BLE001 - compared (and found undecodable) later
                pass
    return ds


def variable_differences(w: Any, g: Any, name: str, values: bool = True) -> list[str]:
    out: list[str] = []
    if w.dims != g.dims:
        out.append(f"{name}: dims {g.dims} != {w.dims}")
    out += attr_differences(w.attrs, g.attrs, f"{name} attributes")
    accepted = float32_packed(w) and w.dtype == np.float32 and g.dtype == np.float64
    if w.dtype != g.dtype and not accepted and not same_text_dtype(w.dtype, g.dtype):
        out.append(f"{name}: dtype {g.dtype} != {w.dtype}")
    if w.shape != g.shape:
        out.append(f"{name}: shape {g.shape} != {w.shape}")
        return out
    if not values:
        return out
    blocks = blocks_compared(w)  # (the file's chunks decide, for both sides)
    try:
        wv = values_of(w, blocks)
    except Exception:  # noqa: BLE001 - xarray over the file cannot decode it either: nothing to compare
        return out
    try:
        gv = values_of(g, blocks)
    except Exception as e:  # noqa: BLE001
        return out + [f"{name}: values cannot be read: {type(e).__name__}: {e}"]
    for part, (a, b) in enumerate(zip(wv, gv)):
        why = float32_difference(a, b) if accepted else value_difference(a, b)
        if why:
            out.append(f"{name}: {why}" + (" (in the trailing block)" if part else ""))
    return out


def float32_difference(a: np.ndarray, b: np.ndarray) -> str | None:
    """Float64 values ``b`` decoded from float32 packing against h5netcdf's float32 ``a``: the same mask,
    and once cast to float32 the same values, or one unit in the last place apart (with an
    ``add_offset``, float32 arithmetic rounds twice where float64 arithmetic rounds once)."""
    b32 = b.astype(np.float32)
    why = value_difference(np.isnan(a), np.isnan(b32)) if a.shape == b32.shape else f"shape {b.shape} != {a.shape}"
    if why:
        return f"mask: {why}"
    ok = ~np.isnan(a)
    ulps = np.abs(a[ok].view(np.int32).astype(np.int64) - b32[ok].view(np.int32).astype(np.int64))
    worst = int(ulps.max(initial=0))
    return None if worst <= 1 else f"packed values differ by up to {worst} float32 ulps"


def float32_packed(v: Any) -> bool:
    """Decoded from float32 ``scale_factor``/``add_offset`` (the one accepted dtype difference)."""
    enc = v.encoding
    return any(isinstance(enc.get(k), (np.floating, np.ndarray)) and np.asarray(enc[k]).dtype == np.float32
               for k in ("scale_factor", "add_offset"))


def same_text_dtype(a: np.dtype, b: np.dtype) -> bool:
    """Variable-length text reads as object (h5netcdf) or numpy's StringDType (zarr 3): both are str to a user."""
    return {a.kind, b.kind} <= {"O", "T"}


def blocks_compared(v: Any) -> tuple[dict, dict] | None:
    """None when the values of ``v`` (the file's view of a variable) are compared whole; else the
    leading and trailing blocks compared: ``EDGE`` elements a side of a huge variable, four chunks a
    side of one of very many chunks."""
    if not v.ndim:
        return None
    chunks = v.encoding.get("chunksizes") or v.encoding.get("chunks") or ()
    count = chunk_count(v.shape, chunks)
    if v.size <= WHOLE and count <= MANY_CHUNKS:
        return None
    sides = [4 * max(1, int(c)) for c in chunks] if count > MANY_CHUNKS else [EDGE] * v.ndim
    return ({d: slice(0, min(n, k)) for d, n, k in zip(v.dims, v.shape, sides)},
            {d: slice(max(0, n - k), n) for d, n, k in zip(v.dims, v.shape, sides)})


def values_of(v: Any, blocks: tuple[dict, dict] | None) -> list[np.ndarray]:
    """The decoded values: whole, or the ``blocks`` (:func:`blocks_compared`)."""
    if blocks is None:
        return [np.asarray(v.values)]
    return [np.asarray(v[blocks[0]].values), np.asarray(v[blocks[1]].values)]


def value_difference(a: np.ndarray, b: np.ndarray) -> str | None:
    """Why ``b`` shows other values than ``a`` (masks included), or None."""
    if a.shape != b.shape:
        return f"shape {b.shape} != {a.shape}"
    if a.dtype.names is not None or b.dtype.names is not None:
        if a.dtype.names != b.dtype.names:
            return f"fields {b.dtype.names} != {a.dtype.names}"
        for f in a.dtype.names:
            why = value_difference(a[f], b[f])
            if why:
                return f"field {f!r}: {why}"
        return None
    if a.dtype.kind in "OTSU" or b.dtype.kind in "OTSU":
        left, right = [text_item(x) for x in a.ravel()], [text_item(x) for x in b.ravel()]
        if left != right:
            first = next(i for i, (x, y) in enumerate(zip(left, right)) if x != y)
            return f"values differ first at flat index {first}: {right[first]!r} != {left[first]!r}"
        return None
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        ma, mb = np.isnan(a) if a.dtype.kind in "fc" else np.zeros(a.shape, bool), (
            np.isnan(b) if b.dtype.kind in "fc" else np.zeros(b.shape, bool))
        if not np.array_equal(ma, mb):
            return f"mask differs: {int(mb.sum())} missing values where the file has {int(ma.sum())}"
    if a.dtype.kind in "mM" and b.dtype.kind in "mM":
        if not np.array_equal(np.isnat(a), np.isnat(b)):
            return "NaT positions differ"
    with np.errstate(invalid="ignore"):
        equal = np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" and b.dtype.kind in "fc")
    if not equal:
        bad = np.argwhere(~((a == b) | (_nan(a) & _nan(b))))
        first = tuple(int(i) for i in bad[0]) if len(bad) else ()
        return f"values differ at {len(bad)} positions, first {first}: {b[first]!r} != {a[first]!r}"
    return None


def _nan(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "fc":
        return np.isnan(x)
    if x.dtype.kind in "mM":
        return np.isnat(x)
    return np.zeros(x.shape, bool)


def text_item(x: Any) -> Any:
    """An element of a text array as a user meets it: str stays str, bytes stay bytes (NaN stays missing)."""
    if isinstance(x, (bytes, np.bytes_)):
        return ("bytes", bytes(x))
    if isinstance(x, (str, np.str_)):
        return ("str", str(x))
    if isinstance(x, float) and np.isnan(x):
        return ("missing", None)
    return (type(x).__name__, x)


# ---------------------------------------------------------------- attributes


def attr_differences(want: dict[str, Any], got: dict[str, Any], where: str) -> list[str]:
    out: list[str] = []
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing or extra:
        out.append(f"{where}: missing {missing}, extra {extra}")
    for k in sorted(set(want) & set(got)):
        why = attr_value_difference(want[k], got[k])
        if why:
            out.append(f"{where}[{k!r}]: {why}")
    return out


def attr_value_difference(w: Any, g: Any) -> str | None:
    """Why attribute value ``g`` is not what a user gets as ``w`` from h5netcdf, or None."""
    wa, ga = _attr_form(w), _attr_form(g)
    if wa[0] != ga[0]:
        return f"{wa[0]} {w!r} shown as {ga[0]} {g!r}"
    kind, wv = wa
    gv = ga[1]
    if kind in ("text", "bytes", "none"):
        return None if wv == gv else f"{g!r} != {w!r}"
    a, b = wv, gv
    if a.shape != b.shape:
        return f"shape {b.shape} != {a.shape}: {g!r} != {w!r}"
    if not a.size:
        return None  # no values: JSON states no type for them
    if a.dtype.kind in "OSU" or b.dtype.kind in "OSU":
        return None if [text_item(x) for x in a.ravel()] == [text_item(x) for x in b.ravel()] else f"{g!r} != {w!r}"
    if a.dtype.kind != b.dtype.kind and not (a.dtype.kind in "iu" and b.dtype.kind in "iu"):
        return f"{b.dtype.kind}-kind {g!r} != {a.dtype.kind}-kind {w!r}"
    try:
        cast = b.astype(a.dtype) if a.dtype.names is None else b
    except (TypeError, ValueError):
        return f"{g!r} != {w!r}"
    with np.errstate(invalid="ignore"):
        same = np.array_equal(a, cast, equal_nan=a.dtype.kind in "fc")
    return None if same else f"{g!r} != {w!r}"


def _attr_form(v: Any) -> tuple[str, Any]:
    """(what a user sees it as, a comparable value): text, bytes, none, scalar or array (an ndarray)."""
    if v is None:
        return "none", None
    if isinstance(v, (str, np.str_)):
        return "text", str(v)
    if isinstance(v, (bytes, np.bytes_)):
        return "bytes", bytes(v)
    if isinstance(v, dict):
        return "mapping", np.asarray([repr(sorted(v.items()))])
    if isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.ndim):
        try:
            arr = np.asarray(v)
        except ValueError:  # items of different shapes (JSON of references): one object each
            arr = np.empty(len(v), dtype=object)
            arr[:] = [x if not isinstance(x, (list, tuple)) else repr(x) for x in v]
        if arr.dtype.kind == "O" and all(isinstance(x, (bytes, np.bytes_)) for x in arr.ravel()):
            arr = arr.astype(bytes)
        return "array", arr
    return "scalar", np.asarray(v)
