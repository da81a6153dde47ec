"""Files of every chunk index libhdf5 writes, for the native index readers' tests and benchmarks.

h5py exposes neither a dataset's index type nor the few creation properties that shape
indexes (B-tree 'K', sizes of addresses, unfiltered edge chunks); they are reached through
h5py's own libhdf5 with ``ctypes`` here (tests only, never the core path).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Callable

import h5py
import numpy as np

INDEX_TYPES = {0: "btree1", 1: "single", 2: "implicit", 3: "farray", 4: "earray", 5: "btree2"}
DONT_FILTER_PARTIAL_CHUNKS = 0x0002  # H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS


def libhdf5() -> Any:
    """h5py's own libhdf5 (resolved through its extension module, whose handle reaches its dependencies)."""
    lib = ctypes.CDLL(h5py.h5.__file__)
    lib.H5Dget_chunk_index_type.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_int)]
    for name, args in (("H5Pset_chunk_opts", [ctypes.c_int64, ctypes.c_uint]),
                       ("H5Pset_istore_k", [ctypes.c_int64, ctypes.c_uint]),
                       ("H5Pset_sizes", [ctypes.c_int64, ctypes.c_size_t, ctypes.c_size_t])):
        getattr(lib, name).argtypes = args
    return lib


def index_type(d: h5py.Dataset) -> str:
    """libhdf5's own name for the chunk index of ``d`` (H5Dget_chunk_index_type)."""
    kind = ctypes.c_int(-1)
    if libhdf5().H5Dget_chunk_index_type(d.id.id, ctypes.byref(kind)) < 0:
        raise RuntimeError(f"H5Dget_chunk_index_type failed for {d.name}")
    return INDEX_TYPES.get(kind.value, f"type {kind.value}")


def create_file(path: str | os.PathLike, libver: str = "earliest", *, istore_k: int | None = None,
                sizes: tuple[int, int] | None = None, userblock: int = 0) -> h5py.File:
    """A new file with the creation properties h5py does not offer."""
    lib = libhdf5()
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    if istore_k is not None:
        lib.H5Pset_istore_k(fcpl.id, istore_k)
    if sizes is not None:
        lib.H5Pset_sizes(fcpl.id, *sizes)
    if userblock:
        fcpl.set_userblock(userblock)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    low = {"earliest": h5py.h5f.LIBVER_EARLIEST, "v108": h5py.h5f.LIBVER_V18, "latest": h5py.h5f.LIBVER_LATEST}[libver]
    fapl.set_libver_bounds(low, h5py.h5f.LIBVER_LATEST)
    fid = h5py.h5f.create(os.fsencode(os.fspath(path)), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
    return h5py.File(fid)


def dataset(f: h5py.File, name: str, shape: tuple, chunks: tuple, dtype: Any = "<i4", maxshape: tuple | None = None,
            *, compression: str | None = None, shuffle: bool = False, fletcher32: bool = False,
            early: bool = False, unfiltered_edges: bool = False) -> h5py.Dataset:
    """A chunked dataset with the given storage properties (through a dataset creation property list)."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(chunks)
    if shuffle:
        dcpl.set_shuffle()
    if compression == "gzip":
        dcpl.set_deflate(4)
    if fletcher32:
        dcpl.set_fletcher32()
    if early:
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    if unfiltered_edges:
        libhdf5().H5Pset_chunk_opts(dcpl.id, DONT_FILTER_PARTIAL_CHUNKS)
    maxshape = shape if maxshape is None else maxshape
    space = h5py.h5s.create_simple(shape, tuple(h5py.h5s.UNLIMITED if m is None else m for m in maxshape))
    tid = h5py.h5t.py_create(np.dtype(dtype), logical=True)
    h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=dcpl)
    return f[name]


def values(shape: tuple, dtype: Any = "<i4", seed: int = 0) -> np.ndarray:
    """Compressible but not constant values (runs of small numbers)."""
    n = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    return (np.repeat(rng.integers(0, 50, max(1, n // 3 + 1)), 3)[:n]).astype(dtype).reshape(shape)


def with_skipped_filter(d: h5py.Dataset, position: tuple) -> None:
    """Store the chunk at element ``position`` raw, recording its first filter as skipped (filter mask 1)."""
    sel = tuple(slice(p, min(p + c, n)) for p, c, n in zip(position, d.chunks, d.shape))
    full = np.zeros(d.chunks, d.dtype)
    full[tuple(slice(0, s.stop - s.start) for s in sel)] = d[sel]
    d.id.write_direct_chunk(position, full.tobytes(), filter_mask=1)


def _edges(f: h5py.File, prefix: str, maxshape: Callable[[tuple], tuple], filtered: dict, **kw: Any) -> None:
    """Unfiltered and filtered datasets with partial edge chunks, one chunk stored with a filter skipped."""
    for tag, opts in (("plain", {}), ("gzip", filtered), ("fletcher", {"fletcher32": True})):
        d = dataset(f, f"{prefix}_{tag}", (10, 7), (3, 2), maxshape=maxshape((10, 7)), **opts, **kw)
        d[...] = values((10, 7), seed=len(tag))
        if opts:
            with_skipped_filter(d, (3, 2))


def build_latest(path: str | os.PathLike, *, big: bool = True) -> str:
    """Every version 4 index: single chunk, implicit, fixed array (paged and not), extensible array
    (super blocks and paged data blocks when ``big``), version 2 B-tree; filtered or not, partial
    edge chunks (stored unfiltered too), chunks with a filter skipped, resized, empty."""
    gz = {"compression": "gzip", "shuffle": True}
    with create_file(path, "latest") as f:
        for tag, opts in (("plain", {}), ("gzip", gz)):
            d = dataset(f, f"single_{tag}", (5, 3), (5, 3), **opts)
            d[...] = values((5, 3))
            dataset(f, f"single_{tag}_empty", (5, 3), (5, 3), **opts)
        with_skipped_filter(dataset(f, "single_skipped", (4,), (4,), **gz), (0,))
        d = dataset(f, "implicit", (10, 7), (3, 2), early=True)
        d[...] = values((10, 7))
        d = dataset(f, "implicit_resized", (10, 7), (3, 2), maxshape=(20, 9), early=True)
        d[...] = values((10, 7))
        d.resize((14, 5))
        _edges(f, "farray", lambda s: s, gz)
        _edges(f, "earray", lambda s: (None,) + s[1:], gz)
        _edges(f, "earray_dim1", lambda s: s[:1] + (None,), gz)
        _edges(f, "btree2", lambda s: (None, None), gz)
        for tag, opts in (("farray", {}), ("earray", {"maxshape": (None, 7)}), ("btree2", {"maxshape": (None, None)})):
            d = dataset(f, f"{tag}_unfiltered_edges", (10, 7), (3, 2), **opts, **gz, unfiltered_edges=True)
            d[...] = values((10, 7))
            dataset(f, f"{tag}_empty", (10, 7), (3, 2), **opts)
        d = dataset(f, "farray_shrunk", (12, 8), (3, 2), maxshape=(12, 8))
        d[...] = values((12, 8))
        d = dataset(f, "farray_paged", (60, 40), (1, 1), "u1", **gz)  # 2,400 chunks: pages of 1,024
        d[:25] = values((25, 40), "u1")  # the last page never written
        d = dataset(f, "earray_grown", (4, 5), (2, 2), maxshape=(None, 5), **gz)
        d[...] = values((4, 5))
        d.resize((41, 5))
        d[30:] = values((11, 5))
        d = dataset(f, "earray_3d", (4, 3, 5), (2, 1, 2), maxshape=(4, None, 5))
        d[...] = values((4, 3, 5))
        d = dataset(f, "btree2_grown", (30, 30), (1, 1), "u1", maxshape=(None, None))
        d[...] = values((30, 30), "u1")
        d.resize((40, 45))
        d[35:, 40:] = 7
        d = dataset(f, "btree2_3d", (6, 5, 4), (2, 2, 2), maxshape=(None, 5, None), **gz)
        d[...] = values((6, 5, 4))
        if big:
            _big_latest(f)
    return os.fspath(path)


def _big_latest(f: h5py.File) -> None:
    """Extensible arrays of 70,000 chunks (super blocks, paged data blocks, a page never written) and a
    version 2 B-tree of 10,000 chunks (two levels of internal nodes)."""
    n = 70_000
    d = dataset(f, "earray_big", (n,), (1,), "u1", maxshape=(None,), compression="gzip")
    data = values((n,), "u1")
    d[:40_000] = data[:40_000]
    d[68_000:] = data[68_000:]  # elements 40,000-67,999 never written: whole pages left out
    d = dataset(f, "btree2_big", (100, 100), (1, 1), "u1", maxshape=(None, None))
    d[...] = values((100, 100), "u1")


def build_earliest(path: str | os.PathLike, libver: str = "earliest", **file_kw: Any) -> str:
    """Version 1 B-trees: one and several levels, filtered or not, partial edge chunks, a chunk with a
    filter skipped, resized (grown and shrunk), empty, big-endian and compound elements."""
    gz = {"compression": "gzip", "shuffle": True}
    with create_file(path, libver, **file_kw) as f:
        _edges(f, "btree1", lambda s: s, gz)
        d = dataset(f, "btree1_deep", (5000,), (1,), "u1", maxshape=(None,))  # three levels with K = 32
        d[...] = values((5000,), "u1")
        d = dataset(f, "btree1_resized", (10, 7), (3, 2), maxshape=(None, None), **gz)
        d[...] = values((10, 7))
        d.resize((4, 11))
        dataset(f, "btree1_empty", (10, 7), (3, 2))
        d = dataset(f, "btree1_bigendian", (9, 4), (2, 3), ">f8")
        d[...] = values((9, 4), ">f8")
        compound = np.dtype([("a", "<i2"), ("b", ">f4"), ("s", "S3")])
        d = dataset(f, "btree1_compound", (7,), (3,), compound)
        d[...] = np.array([(i, i / 2, b"ab") for i in range(7)], compound)
        d = dataset(f, "btree1_3d", (5, 4, 6), (2, 3, 4), **gz)
        d[...] = values((5, 4, 6))
    return os.fspath(path)


def build_all(folder: str | os.PathLike, *, big: bool = True) -> list[str]:
    """One file of each kind into ``folder``: every index type, and version 1 B-trees under each
    superblock and file-creation setting that changes how they are read."""
    folder = os.fspath(folder)
    return [
        build_latest(os.path.join(folder, "latest.h5"), big=big),
        build_earliest(os.path.join(folder, "earliest.h5")),
        build_earliest(os.path.join(folder, "v108.h5"), "v108"),  # superblock version 2
        build_earliest(os.path.join(folder, "k8.h5"), istore_k=8),  # superblock version 1: 'K' = 8
        build_earliest(os.path.join(folder, "v108_k8.h5"), "v108", istore_k=8),  # 'K' in the superblock extension
        build_earliest(os.path.join(folder, "offsets4.h5"), sizes=(4, 4)),  # 4-byte addresses and lengths
        build_earliest(os.path.join(folder, "userblock.h5"), userblock=1024),  # addresses after a user block
        _latest_small_offsets(os.path.join(folder, "latest_offsets4.h5")),
    ]


def _latest_small_offsets(path: str) -> str:
    """Version 4 indexes in a file of 4-byte addresses and lengths, after a user block (fixed shapes:
    libhdf5 cannot store an unlimited extent in 4-byte lengths)."""
    with create_file(path, "latest", sizes=(4, 4), userblock=512) as f:
        gz = {"compression": "gzip"}
        _edges(f, "farray", lambda s: s, gz)
        d = dataset(f, "farray_paged", (40, 40), (1, 1), "u1", **gz)
        d[:30] = values((30, 40), "u1")
        d = dataset(f, "single", (5, 3), (5, 3), **gz)
        d[...] = values((5, 3))
    return path


def chunked_datasets(f: h5py.File) -> list[h5py.Dataset]:
    """Every chunked dataset of an open file (not virtual ones), in a walk's order."""
    out: list[h5py.Dataset] = []

    def visit(_name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset) and obj.chunks is not None and not obj.is_virtual:
            out.append(obj)

    f.visititems(visit)
    return out


# ------------------------------------------------------------------ fuzzing the index structures
def build_fuzz_files(folder: str | os.PathLike) -> list[str]:
    """Small files whose chunk indexes span several nodes, blocks or pages of each kind (cheap to fuzz)."""
    folder = os.fspath(folder)
    gz = {"compression": "gzip"}
    v1 = os.path.join(folder, "fuzz_btree1.h5")
    with create_file(v1) as f:
        d = dataset(f, "deep", (300,), (1,), "u1", maxshape=(None,))  # two levels
        d[...] = values((300,), "u1")
        d = dataset(f, "gzip", (10, 7), (3, 2), **gz)
        d[...] = values((10, 7))
        with_skipped_filter(d, (3, 2))
    v4 = os.path.join(folder, "fuzz_latest.h5")
    with create_file(v4, "latest") as f:
        d = dataset(f, "farray_paged", (1100,), (1,), "u1", **gz)
        d[:1030] = values((1030,), "u1")
        d = dataset(f, "farray", (10, 7), (3, 2))
        d[...] = values((10, 7))
        d = dataset(f, "earray", (600,), (1,), "u1", maxshape=(None,))  # super blocks
        d[...] = values((600,), "u1")
        d = dataset(f, "earray_gzip", (10, 7), (3, 2), maxshape=(None, 7), **gz)
        d[...] = values((10, 7))
        d = dataset(f, "btree2", (20, 20), (1, 1), "u1", maxshape=(None, None))  # internal nodes
        d[...] = values((20, 20), "u1")
        d = dataset(f, "single", (5, 3), (5, 3), **gz)
        d[...] = values((5, 3))
    return [v1, v4]


def local_fetch(path: str) -> Callable[[list[int], list[int]], list[bytes]]:
    def fetch(offsets: list[int], sizes: list[int]) -> list[bytes]:
        with open(path, "rb") as fh:
            out = []
            for o, n in zip(offsets, sizes):
                fh.seek(o)
                out.append(fh.read(n))
            return out
    return fetch


def dataset_facts(d: h5py.Dataset) -> Any:
    """What the scanner tells the native readers about ``d`` (see refindex.scanner._listing)."""
    from ..scanner.chunkindex import DatasetFacts

    dcpl = d.id.get_create_plist()
    return DatasetFacts(d.name, int(h5py.h5g.get_objinfo(d.id).objno[0]), tuple(d.shape), tuple(d.maxshape),
                        tuple(dcpl.get_chunk()), None if d.dtype.hasobject else d.id.get_type().get_size(),
                        dcpl.get_nfilters() > 0)


def native(path: str, f: h5py.File, d: h5py.Dataset, fetch: Callable | None = None) -> Any:
    """(listing, layout) of ``d`` from the native readers, reading ``path`` through ``fetch``."""
    from ..scanner.chunkindex import file_facts, read_chunk_index

    fetch = fetch or local_fetch(path)
    fcpl = f.id.get_create_plist()
    facts = file_facts(fetch, fcpl.get_sizes(), fcpl.get_userblock(), os.path.getsize(path))
    listing, layout, _ = read_chunk_index(fetch, facts, dataset_facts(d))
    return listing, layout


def index_ranges(path: str) -> list[tuple[int, int]]:
    """Byte ranges the native readers read in ``path`` (superblock, object headers, index structures)."""
    seen: list[tuple[int, int]] = []
    plain = local_fetch(path)

    def fetch(offsets: list[int], sizes: list[int]) -> list[bytes]:
        seen.extend((o, o + n) for o, n in zip(offsets, sizes))
        return plain(offsets, sizes)

    with h5py.File(path, "r") as f:
        for d in chunked_datasets(f):
            native(path, f, d, fetch)
    return sorted(set(seen))


def index_case(source: str) -> dict[str, Any]:
    """Worker job: per chunked dataset of a (damaged) file, the native listing next to libhdf5's.

    Outcomes: "same" (both list the same chunks), "fallback" (the native readers refuse: libhdf5
    lists it in a scan), "both-fail"; findings: "mismatch" (both list, differently),
    "native-only" (libhdf5 cannot list what the native readers listed), "internal:<exception>".
    """
    from ..errors import RefindexError
    from ..scanner import chunk_table
    from ..scanner.chunkindex import Unparsed

    out: dict[str, Any] = {"outcomes": [], "details": []}
    try:
        f = h5py.File(source, "r")
    except Exception:  # noqa: BLE001 - libhdf5 cannot open it: nothing to list
        return {"outcomes": ["unopenable"], "details": []}
    with f:
        try:
            found = chunked_datasets(f)
        except Exception:  # noqa: BLE001
            return {"outcomes": ["unwalkable"], "details": []}
        for d in found:
            try:
                got = native(source, f, d)[0]
            except Unparsed:
                got = None
            except RefindexError as e:
                got = e
            except Exception as e:  # noqa: BLE001 - a native reader's bug
                out["outcomes"].append(f"internal:{type(e).__name__}")
                out["details"].append(f"{d.name}: {type(e).__name__}: {e}"[:300])
                continue
            try:
                want, masks = chunk_table(d, d.ndim, d.chunks)
            except Exception:  # noqa: BLE001
                want = None
            out["outcomes"].append(_judge(got, want, masks if want is not None else None))
            if out["outcomes"][-1] in ("mismatch", "native-only"):
                out["details"].append(f"{d.name}: {out['outcomes'][-1]}")
    return out


def _judge(got: Any, want: Any, masks: Any) -> str:
    if got is None or isinstance(got, Exception):
        return "fallback" if want is not None else "both-fail"
    if want is None:
        return "native-only"
    same = (np.array_equal(got.coords, want.coords) and np.array_equal(got.offsets, want.offsets)
            and np.array_equal(got.sizes, want.sizes) and np.array_equal(got.masks, masks))
    return "same" if same else "mismatch"
