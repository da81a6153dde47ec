"""refindex as a VirtualiZarr parser (issue #15): ``open_virtual_dataset(..., parser=refindex.virtualizarr.Parser())``.

Every value is proven against h5py on the file itself, after the virtual dataset went
through VirtualiZarr's own writers and came back through xarray:

* ``vds.vz.to_kerchunk(format="dict", zarr_format=3)``, read with fsspec's
  ReferenceFileSystem and xarray's zarr engine;
* ``vds.vz.to_icechunk(session.store)`` into a local Icechunk repository (virtual chunks
  under a ``file://`` virtual chunk container, inlined chunks as native ones), read with
  ``xr.open_zarr``.

Values are compared raw (``decode_cf=False``: no masking, scaling or time decoding on
either side), NaN-aware, shape and dtype kind included.

Which corpus data xarray can represent (the rule, decided on the file with h5py alone,
before any refindex code runs): files that are not HDMF/NWB (those are refused by design),
and in each group the datasets whose HDF5 type is a number, bool, enum of numbers,
fixed- or variable-length string or datetime, with a simple or scalar dataspace.
A null dataspace (no element) is an empty variable, compared as one (issue 45).
Compounds, references, variable-length sequences, opaque data and
arrays of arrays are what xarray cannot hold as plain variables: they are dropped
(``drop_variables``), so the rest of the group is still tested.  Each group with at least
one such dataset is opened as ``Parser(group=...)``; a file is exact when every group is.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from corpus import CORPUS, MISSING, manifest_rows, sampled

vz = pytest.importorskip("virtualizarr", reason="virtualizarr is not installed (pip install refindex[virtualizarr])")
obstore = pytest.importorskip("obstore", reason="obstore is not installed (pip install refindex[virtualizarr])")
xr = pytest.importorskip("xarray")
icechunk = pytest.importorskip("icechunk", reason="icechunk is not installed")

from obspec_utils.registry import ObjectStoreRegistry  # noqa: E402

import refindex  # noqa: E402
import refindex.virtualizarr as rv  # noqa: E402
from refindex.errors import RefindexError  # noqa: E402

warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
warnings.filterwarnings("ignore", message=".*chunk shape larger than their array shape.*")

SIMPLE_KINDS = "biufcSUMm"
NC_DIM_ONLY = "This is a netCDF dimension but not a netCDF variable"
WHOLE = 1 << 22  # arrays of more elements (or chunks) are compared on their first and last chunks
MAX_CHUNKS = 256


@pytest.fixture(autouse=True)
def _icechunk_garbage(collect_in_main_thread):
    """Icechunk objects are released between tests, in the main thread (see conftest)."""



def registry() -> ObjectStoreRegistry:
    return ObjectStoreRegistry({"file://": obstore.store.LocalStore()})


# ---------------------------------------------------------------- what xarray can represent


def unrepresentable(d: h5py.Dataset) -> str | None:
    """Why xarray cannot hold dataset ``d`` as a plain variable (None: it can)."""
    if d.shape is None:  # a null dataspace: an empty variable (no value), compared as such
        return None
    dt = d.dtype
    if h5py.check_string_dtype(dt) is not None:
        return None
    if dt.names is not None:
        return "compound"
    if h5py.check_ref_dtype(dt) is not None:
        return "reference"
    if h5py.check_vlen_dtype(dt) is not None:
        return "variable-length sequence"
    if dt.subdtype is not None:
        return "array datatype"
    if dt.kind not in SIMPLE_KINDS:
        return f"numpy kind {dt.kind!r}"
    return None


def h5_readable(d: h5py.Dataset) -> bool:
    """Can h5py (the reference) read the values? (filters without a plugin here: no reference to compare with)"""
    try:
        d[tuple(0 for _ in d.shape)] if d.size else d[()]
        return True
    except (OSError, ValueError, TypeError):
        return False


def is_hdmf(f: h5py.File) -> bool:
    a = f.attrs
    return ".specloc" in a or ("namespace" in a and "neurodata_type" in a)


def plan(path: str) -> dict[str, tuple[list[str], list[str]]] | None:
    """group path -> (datasets xarray can hold, the others); None for HDMF/NWB files."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    with h5py.File(path, "r") as f:
        if is_hdmf(f):
            return None
        names: list[str] = []
        f.visit(names.append)  # names first, reads after (h5py + zarr inside visit deadlocks)
        for name in ["", *names]:
            try:
                obj = f[name] if name else f
            except (KeyError, OSError):
                continue  # dangling links and friends: nothing to read
            if not isinstance(obj, h5py.Group):
                continue
            kept, dropped = [], []
            for child in obj:
                try:
                    if isinstance(obj.get(child, getlink=True), h5py.ExternalLink):
                        continue  # another file's data (refindex records the link, as zarr_link)
                    d = obj[child]
                except (KeyError, OSError, TypeError):  # dangling, or a user-defined link
                    continue
                if isinstance(d, h5py.Dataset):
                    (dropped if unrepresentable(d) or not h5_readable(d) or NC_DIM_ONLY in str(d.attrs.get("NAME", b""))
                     else kept).append(child)
            # drop_variables names what xarray shows: netCDF's dimension-only scale "x" is no variable there,
            # and the name belongs to "_nc4_non_coord_x", which is shown as "x"
            shown = {k.removeprefix("_nc4_non_coord_") for k in kept}
            dropped = [d for d in dropped if d not in shown]
            if kept:
                out["/" + name] = (sorted(kept), sorted(dropped))
    return out


# ---------------------------------------------------------------- comparison


def selections(shape: tuple[int, ...], chunks: tuple[int, ...] | None) -> list[tuple[slice, ...]]:
    """The whole array; for a large one (elements or chunks) its first and last chunk (64 per axis when contiguous).

    zarr decodes ~0.15 ms per chunk, twice per array here (kerchunk, Icechunk): arrays of
    thousands of tiny chunks would take most of the test's time on a few files.
    """
    block = chunks or tuple(64 for _ in shape)
    count = np.prod([-(-n // c) for n, c in zip(shape, block)], dtype=np.float64) if chunks else 1
    if int(np.prod(shape, dtype=np.float64)) <= WHOLE and count <= MAX_CHUNKS:
        return [tuple(slice(None) for _ in shape)]
    return [tuple(slice(0, min(c, n)) for n, c in zip(shape, block)),
            tuple(slice((max(n - 1, 0) // c) * c, n) for n, c in zip(shape, block))]


def h5_values(d: h5py.Dataset, sel: tuple[slice, ...]) -> np.ndarray:
    if h5py.check_string_dtype(d.dtype) is not None and h5py.check_string_dtype(d.dtype).length is None:
        return np.asarray(d.asstr()[sel] if sel else d.asstr()[()], dtype=object)
    return np.asarray(d[sel] if sel else d[()])


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes and values, NaN equal to NaN; text compared as str."""
    if a.shape != b.shape:
        return False
    if a.dtype == object or b.dtype.kind == "T" or b.dtype == object or a.dtype.kind == "T":
        return [str(x) for x in a.ravel()] == [str(x) for x in b.ravel()]
    if a.dtype.kind in "fc" and b.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True)) and a.dtype.itemsize == b.dtype.itemsize
    return bool(np.array_equal(a, b)) and a.dtype.kind == b.dtype.kind


def differences(path: str, group: str, names: list[str], ds: Any) -> list[str]:
    """Names of ``group`` whose xarray values differ from h5py's (or are missing)."""
    bad = []
    cwd = os.getcwd()
    os.chdir(os.path.dirname(path))  # libhdf5 finds external raw data files from the working directory
    try:
        with h5py.File(path, "r") as f:
            g = f[group]
            for name in names:
                shown = name.removeprefix("_nc4_non_coord_") or name  # netCDF's view: the variable's own name
                if shown not in ds.variables:
                    bad.append(f"{group}:{name} missing")
                    continue
                d = g[name]
                if d.shape is None:  # a null dataspace (h5py: Empty): an empty variable, no value
                    if ds[shown].shape != (0,) or np.asarray(ds[shown].values).size:
                        bad.append(f"{group}:{name}")
                    continue
                for sel in selections(d.shape, d.chunks):
                    if not same(h5_values(d, sel), np.asarray(ds[shown].variable[sel].values)):
                        bad.append(f"{group}:{name}")
                        break
    finally:
        os.chdir(cwd)
    return bad


def open_kerchunk(refs: dict) -> Any:
    return xr.open_dataset("reference://", engine="zarr", decode_cf=False, backend_kwargs=dict(
        consolidated=False, zarr_format=3, storage_options=dict(fo=refs, remote_protocol="file")))


class Repo:
    """A local Icechunk repository whose virtual chunks may live under ``folder`` (any file:// path below it)."""

    def __init__(self, where: Path, folder: str) -> None:
        self.where = str(where)
        prefix = "file://" + os.path.abspath(folder).rstrip("/") + "/"
        config = icechunk.RepositoryConfig.default()
        config.set_virtual_chunk_container(icechunk.VirtualChunkContainer(
            prefix, icechunk.local_filesystem_store(os.path.abspath(folder))))
        self.credentials = icechunk.containers_credentials({prefix: icechunk.credentials.LocalFileSystemAccess})
        self.repo = icechunk.Repository.create(storage=icechunk.local_filesystem_storage(self.where), config=config,
                                               authorize_virtual_chunk_access=self.credentials)

    def write(self, datasets: dict[str, Any]) -> None:
        session = self.repo.writable_session("main")
        for group, vds in datasets.items():
            vds.vz.to_icechunk(session.store, group=group.strip("/") or None)
        session.commit("virtual datasets")

    def open(self, group: str) -> Any:
        repo = icechunk.Repository.open(storage=icechunk.local_filesystem_storage(self.where),
                                        authorize_virtual_chunk_access=self.credentials)
        return xr.open_zarr(repo.readonly_session("main").store, group=group.strip("/") or None, consolidated=False,
                            zarr_format=3, decode_cf=False, chunks=None)


def check_file(path: str, groups: dict[str, tuple[list[str], list[str]]], tmp: Path, folder: str = str(CORPUS),
               **options: Any) -> list[str]:
    """Every group of ``path`` through the parser, kerchunk and Icechunk: the differences found.

    ``folder``: where every file the chunks live in is (the Icechunk virtual chunk container).
    """
    reg = registry()
    vdss = {}
    bad: list[str] = []
    for group, (kept, dropped) in groups.items():
        parser = rv.Parser(group=group, drop_variables=dropped, **({"on_unsupported": "skip"} | options))
        vds = vz.open_virtual_dataset(path, parser=parser, registry=reg, loadable_variables=[])
        vdss[group] = vds
        refs = vds.vz.to_kerchunk(format="dict", zarr_format=3)
        bad += [f"kerchunk {x}" for x in differences(path, group, kept, open_kerchunk(refs))]
    repo = Repo(tmp / "repo", folder)
    repo.write(vdss)
    for group, (kept, _) in groups.items():
        bad += [f"icechunk {x}" for x in differences(path, group, kept, repo.open(group))]
    return bad


# ---------------------------------------------------------------- the corpus


def corpus_files() -> list[str]:
    return [str(CORPUS / r["relpath"]) for r in manifest_rows() if not r["relpath"].endswith((".tsv", ".bin"))]


@pytest.mark.skipif(not corpus_files(), reason=MISSING)
@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: os.path.relpath(p, CORPUS))
def test_corpus_through_virtualizarr_kerchunk_and_icechunk(path, tmp_path):
    """Every corpus file xarray can represent reads back exact after kerchunk and Icechunk (files of
    thousands of arrays: a sample of them, see corpus.sampled)."""
    groups = plan(path)
    if not groups:
        pytest.skip("nothing xarray can hold (an HDMF/NWB file, or no dataset it can represent)")
    for g, (kept, dropped) in list(groups.items()):
        sample = sampled(kept)  # the others are dropped by the parser (by the names xarray shows)
        groups[g] = (sample, dropped + [k.removeprefix("_nc4_non_coord_") for k in kept if k not in sample])
    assert not check_file(path, groups, tmp_path)


# ---------------------------------------------------------------- files made here


def write_kinds(path: Path) -> None:
    """One HDF5 file with the layouts and types VirtualiZarr's own parser gets wrong or refuses."""
    with h5py.File(path, "w") as f:
        f.create_dataset("chunked", data=np.arange(600, dtype="<f4").reshape(20, 30), chunks=(7, 8),
                         compression="gzip", shuffle=True, fillvalue=np.nan)
        sparse = f.create_dataset("sparse", shape=(10, 10), chunks=(5, 5), dtype="<i2", fillvalue=-7)
        sparse[0:5, 0:5] = 3  # three chunks never written: read as the fill value
        f.create_dataset("bigendian", data=np.arange(12, dtype=">i4"))
        f.create_dataset("lzf", data=np.linspace(0, 1, 5000), chunks=(1000,), compression="lzf")
        f.create_dataset("contiguous", data=np.arange(70000, dtype="<u2"))
        f.create_dataset("scalar", data=np.float64(2.5))
        f.create_dataset("text", data=["a", "bb", "ccc"], dtype=h5py.string_dtype())
        f.create_dataset("fixed", data=np.array([b"xy", b"z"], dtype="S2"))
        f.create_dataset("empty", shape=(0, 4), dtype="<f8", chunks=(1, 4), maxshape=(None, 4))
        g = f.create_group("inner")
        g.create_dataset("values", data=np.arange(9, dtype="<i8").reshape(3, 3))


def write_compact(path: Path) -> None:
    """A compact dataset (its bytes live in the object header: VirtualiZarr's own parser reads it as zeros)."""
    space = h5py.h5s.create_simple((6,))
    plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    plist.set_layout(h5py.h5d.COMPACT)
    with h5py.File(path, "a") as f:
        dset = h5py.h5d.create(f.id, b"compact2", h5py.h5t.STD_I32LE, space, plist)
        dset.write(h5py.h5s.ALL, h5py.h5s.ALL, np.arange(6, dtype="<i4") * 11)


def test_layouts_and_types_read_back_exact_through_kerchunk_and_icechunk(tmp_path):
    path = tmp_path / "kinds.h5"
    write_kinds(path)
    write_compact(path)
    groups = plan(str(path))
    assert groups["/"][0] == sorted(["chunked", "sparse", "bigendian", "compact2", "lzf", "contiguous", "scalar", "text",
                                     "fixed", "empty"])
    assert check_file(str(path), groups, tmp_path, folder=str(tmp_path), on_unsupported="error") == []


def test_manifests_hold_references_inline_chunks_and_missing_chunks(tmp_path):
    path = tmp_path / "kinds.h5"
    write_kinds(path)
    write_compact(path)
    store = rv.Parser(inline_threshold=0, inline_dataset_threshold=0)(path.as_uri(), registry())
    root = store._group
    sparse = root.arrays["sparse"].manifest
    assert sparse.shape_chunk_grid == (2, 2)
    paths = sparse._paths
    assert paths[0, 0] == path.as_uri() and paths[1, 1] == ""  # written chunk; never-written one: fill value
    compact = root.arrays["compact2"].manifest
    assert compact._paths[0] == "__inlined__" and compact._inlined[(0,)] == (np.arange(6, dtype="<i4") * 11).tobytes()
    assert root.groups["inner"].arrays["values"].shape == (3, 3)
    assert "lzf" in root.arrays and root.arrays["lzf"].metadata.codecs[-1].to_dict()["name"].endswith("lzf")


def write_day(path: Path, day: int) -> None:
    """A netCDF-4 file of one day: time/lat/lon coordinates and variables of several layouts."""
    import h5netcdf

    with h5netcdf.File(path, "w") as f:
        f.dimensions = {"time": 4, "lat": 3, "lon": 5, "nstation": 2}
        t = f.create_variable("time", ("time",), "f8")
        t[:] = day * 24 + np.arange(4) * 6.0
        t.attrs["units"] = "hours since 2026-01-01"
        f.create_variable("lat", ("lat",), "f4", data=np.array([10, 20, 30], "f4"))
        f.create_variable("lon", ("lon",), "f4", data=np.arange(5, dtype="f4") * 2)
        rng = np.random.default_rng(day)
        temp = f.create_variable("temp", ("time", "lat", "lon"), "f4", chunks=(2, 3, 5), compression="gzip",
                                 shuffle=True, fillvalue=np.float32(-999))
        data = rng.normal(280, 5, (4, 3, 5)).astype("f4")
        data[1, 1, 1] = -999
        temp[:] = data
        temp.attrs["units"] = "K"
        f.create_variable("precip", ("time", "lat", "lon"), "i2", data=rng.integers(0, 50, (4, 3, 5)).astype("i2"))
        f.create_variable("station", ("nstation",), h5py.string_dtype(), data=np.array(["north", "south"], dtype=object))
        f.create_variable("crs", (), "i4", data=np.int32(4326))


def test_three_netcdf_files_concatenated_along_time_then_icechunk(tmp_path):
    """open_virtual_dataset x3, xr.concat along time, to_icechunk: equal to xarray over the three files."""
    paths = [tmp_path / f"day{i}.nc" for i in range(3)]
    for i, p in enumerate(paths):
        write_day(p, i)
    reg = registry()
    vdss = [vz.open_virtual_dataset(str(p), parser=rv.Parser(), registry=reg) for p in paths]
    assert {"time", "lat", "lon"} <= set(vdss[0].coords) and vdss[0]["temp"].dims == ("time", "lat", "lon")
    combined = xr.concat(vdss, dim="time", coords="minimal", compat="override", data_vars="minimal")
    assert combined["temp"].data.manifest.shape_chunk_grid == (6, 1, 1)
    repo = Repo(tmp_path / "repo", str(tmp_path))
    repo.write({"/": combined})
    for decode in (False, True):
        expected = xr.concat([xr.open_dataset(p, engine="h5netcdf", decode_cf=decode) for p in paths], dim="time",
                             coords="minimal", compat="override", data_vars="minimal")
        got = repo.open("/") if not decode else xr.open_zarr(
            icechunk.Repository.open(storage=icechunk.local_filesystem_storage(repo.where),
                                     authorize_virtual_chunk_access=repo.credentials).readonly_session("main").store,
            consolidated=False, zarr_format=3, chunks=None)
        assert set(got.variables) == set(expected.variables)
        assert {"time", "lat", "lon"} <= set(got.coords)
        for name in expected.variables:
            a, b = expected[name].values, got[name].values
            assert expected[name].dims == got[name].dims, name
            assert same(np.asarray(a), np.asarray(b)), name
    assert got["time"].values[0] == np.datetime64("2026-01-01T00:00")


def test_nwb_files_are_refused_with_a_pointer_to_refindex_v3(tmp_path):
    path = tmp_path / "session.nwb"
    with h5py.File(path, "w") as f:
        f.attrs["namespace"] = "core"
        f.attrs["neurodata_type"] = "NWBFile"
        f.create_dataset("x", data=np.arange(3))
    with pytest.raises(RefindexError, match="NWBZarrIO"):
        vz.open_virtual_dataset(str(path), parser=rv.Parser(), registry=registry())
    vds = vz.open_virtual_dataset(str(path), parser=rv.Parser(convention="plain"), registry=registry(),
                                  loadable_variables=[])
    assert vds["x"].shape == (3,)


def test_refusals_raise_what_virtualizarrs_own_hdf_parser_raises(tmp_path):
    """Issue 45: a ``group=`` that names a dataset (or nothing) is a ``ValueError`` for VirtualiZarr's
    HDFParser, an NWB file with object references a ``NotImplementedError``: refindex's parser raises
    RefindexErrors that are those too, and says what is there (before: a bare RefindexError,
    "no group 'group/data' in the index of this file (groups: ['/', '/group', '/group/sub'])")."""
    from virtualizarr.parsers import HDFParser

    path = tmp_path / "g.h5"
    with h5py.File(path, "w") as f:
        f["group/data"] = np.arange(4.0)
        f["group/sub/x"] = np.arange(3)
    for group, said in (("group/data", "group 'group/data' is an array (an HDF5 dataset), not a group; "
                                       "the groups in /group: /group/sub"),
                        ("nope", "group 'nope' is not in the file; the groups in /: /group")):
        with pytest.raises(ValueError):
            HDFParser(group=group)(path.as_uri(), registry())
        with pytest.raises(ValueError) as err:
            rv.Parser(group=group)(path.as_uri(), registry())
        assert isinstance(err.value, refindex.GroupNotFound) and str(err.value) == f"{path}: {said}"
    nwb = tmp_path / "session.nwb"
    with h5py.File(nwb, "w") as f:
        f.attrs["namespace"], f.attrs["neurodata_type"] = "core", "NWBFile"
        refs = f.create_dataset("refs", shape=(1,), dtype=h5py.ref_dtype)
        refs[0] = f.create_dataset("x", data=np.arange(3)).ref
    for parser in (HDFParser(), rv.Parser(), rv.Parser(isolate=True)):  # (the class crosses the worker's pipe)
        with pytest.raises(NotImplementedError) as err:
            parser(nwb.as_uri(), registry())
        assert isinstance(parser, HDFParser) or isinstance(err.value, RefindexError) and "NWBZarrIO" in str(err.value)


def test_a_registry_without_the_file_fails_naming_it(tmp_path):
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(RefindexError, match="ObjectStoreRegistry has no store"):
        rv.Parser()(path.as_uri(), ObjectStoreRegistry({"s3://bucket": obstore.store.MemoryStore()}))


def test_parser_options_pickle_and_isolate(tmp_path):
    """Options as refindex.scan's; the parser pickles (parallel open_virtual_mfdataset) and can isolate libhdf5."""
    import pickle

    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(1000, dtype="<i4"), chunks=(10,))
    parser = pickle.loads(pickle.dumps(rv.Parser(inline_threshold=0, inline_dataset_threshold=0, isolate=True, timeout=120)))
    assert parser.options.inline_threshold == 0 and parser.options.zarr_format == 3
    vds = vz.open_virtual_dataset(str(path), parser=parser, registry=registry(), loadable_variables=[])
    manifest = vds["x"].data.manifest
    assert not manifest._inlined and manifest.shape_chunk_grid == (100,)
    ds = xr.open_zarr(rv.Parser()(path.as_uri(), registry()), consolidated=False, zarr_format=3, chunks=None)
    assert np.array_equal(ds["x"].values, np.arange(1000))  # the ManifestStore itself, chunks through the registry
