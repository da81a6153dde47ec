"""Golden digests: the JSON index of every corpus file and of the test-built files, hashed.

A change to how refindex is organised must leave every index byte for byte as it was;
a change of output made on purpose updates the digests in the same commit, saying why::

    python tests/golden.py --update          # rewrite tests/data/golden_digests.json
    python tests/golden.py --diff            # list what differs from the stored digests

The inputs are built fresh each time in a new process (so nothing registered by another
test, such as an NWB extension, leaks in): pynwb files with seeded object ids, the demo
files and a zoo of small HDF5 files with every layout, type, filter and link kind the
scanner handles.  Volatile fields are masked before hashing: refindex's version, the
source's mtime/etag, its fingerprint's digest and, for built files, the bytes of the pages (some
built files differ per build in bytes no other field holds, e.g. times in object headers), and the folders the files were built in.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DIGESTS = HERE / "data" / "golden_digests.json"
sys.path.insert(0, str(HERE))
from corpus import CORPUS  # noqa: E402


# ---------------------------------------------------------------- inputs
def _seed_object_ids() -> None:
    """pynwb/hdmf give every container a random uuid4: seeded here so files repeat exactly."""
    import hdmf.container

    rng = random.Random(2026)

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    hdmf.container.uuid4 = uuid4
    uuid.uuid4 = uuid4


def _zoo(folder: Path) -> dict[str, Path]:
    """Small files covering what tests/test_features.py covers, with fixed values."""
    import h5py
    import hdf5plugin

    out: dict[str, Path] = {}

    def new(name: str, **kw: Any) -> h5py.File:
        out[name] = folder / f"{name}.h5"
        return h5py.File(out[name], "w", **kw)

    grid = (np.arange(280, dtype="<f8").reshape(40, 7) % 13) / 4
    with new("dtypes") as f:
        for i, dt in enumerate(["<i1", "<u1", "<i2", ">u2", "<i4", ">i4", "<u8", "<f2", ">f4", "<f8", "<c8",
                                "<c16", "|b1"]):
            data = (grid * 3).astype(dt) if dt != "|b1" else grid > 1
            f.create_dataset(f"contig_{i}", data=data)
            f.create_dataset(f"chunked_{i}", data=data, chunks=(16, 4), compression="gzip")
        f.create_dataset("enum", data=np.array([0, 1, 42], "i1"), dtype=h5py.enum_dtype({"R": 0, "G": 1, "B": 42},
                                                                                           basetype="i1"))
        f.create_dataset("fixed", data=np.array([b"alpha", b"be", b"", b"gamma"], dtype="S5"))
        f.create_dataset("vlen", data=["", "hello", "Δt = 5 µs"], dtype=h5py.string_dtype())
        f.create_dataset("vlen_scalar", data="just one", dtype=h5py.string_dtype())
        seq = f.create_dataset("seq", shape=(3,), dtype=h5py.vlen_dtype("i4"))
        for i in range(3):
            seq[i] = np.arange(i, dtype="i4")
        f.create_dataset("opaque", data=np.array([b"abcdefgh", b"zzzzzzzz"], dtype="V8"))
        f.create_dataset("null", data=h5py.Empty("f4"))
        f.create_dataset("scalar", data=np.float64(3.25))
        f.create_dataset("zero", shape=(0, 3), dtype="f4")
        cmp = np.dtype({"names": ["a", "b", "arr"], "formats": ["<i2", ">f8", ("<i4", (3,))],
                        "offsets": [0, 8, 16], "itemsize": 32})
        f.create_dataset("compound", data=np.zeros(25, cmp), chunks=(10,))
        arr = f.create_dataset("array_type", shape=(8,), dtype=np.dtype(("<i4", (3,))), chunks=(4,))
        arr[...] = np.arange(24, dtype="<i4").reshape(8, 3)
        t = f.create_dataset("refs/target", data=np.arange(5))
        refs = f.create_dataset("refs/objects", shape=(2,), dtype=h5py.ref_dtype)
        refs[0], refs[1] = t.ref, f["refs"].ref
        regions = f.create_dataset("refs/regions", shape=(1,), dtype=h5py.regionref_dtype)
        regions[0] = t.regionref[1:3]
        mixed = np.dtype([("name", h5py.string_dtype()), ("target", h5py.ref_dtype), ("x", "<f8")])
        table = f.create_dataset("refs/table", shape=(2,), dtype=mixed)
        table[0], table[1] = ("a", t.ref, 0.5), ("b", t.ref, 1.5)
        f.attrs["nan"], f.attrs["text"], f.attrs["ints"] = np.nan, "Δt ü", np.arange(3, dtype="u8")
        f.attrs["empty"] = h5py.Empty("f8")
        f.attrs["ref"] = t.ref
    with new("layouts") as f:
        f.create_dataset("contiguous", data=np.arange(50_000, dtype="<i8"))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        f.create_dataset("compact", data=np.arange(30, dtype=">i2").reshape(5, 6), dcpl=dcpl)
        sparse = f.create_dataset("sparse", shape=(100, 100), chunks=(10, 10), dtype="f4", fillvalue=-1)
        sparse[0:10, 0:10] = 1
        sparse[50:60, 30:40] = 2
        grow = f.create_dataset("resizable", shape=(5, 4), maxshape=(None, 4), chunks=(3, 4), dtype="i2")
        grow[...] = np.arange(20).reshape(5, 4)
        grow.resize((12, 4))
        f.create_dataset("many_tiny", data=np.arange(3000, dtype="u1").reshape(60, 50), chunks=(1, 5))
        x = f.create_dataset("x", data=np.arange(4.0))
        x.make_scale("x")
        d = f.create_dataset("with_scales", data=np.zeros((3, 4)))
        d.dims[1].attach_scale(x)
        f["soft"] = h5py.SoftLink("/contiguous")
        f["dangling"] = h5py.SoftLink("/nowhere")
        f["hard"] = f["x"]
        f["odd.name, #1"] = np.arange(3)
    for name, kw in {"gzip": dict(compression="gzip", compression_opts=6),
                     "shuffle_fletcher32": dict(shuffle=True, fletcher32=True, compression="gzip"),
                     "lzf": dict(compression="lzf"), "blosc": dict(**hdf5plugin.Blosc(cname="lz4")),
                     "zstd": dict(**hdf5plugin.Zstd()), "lz4": dict(**hdf5plugin.LZ4()),
                     "bzip2": dict(**hdf5plugin.BZip2()), "bitshuffle": dict(**hdf5plugin.Bitshuffle(cname="lz4")),
                     "scaleoffset": dict(scaleoffset=2)}.items():
        with new(f"filter_{name}") as f:
            f.create_dataset("x", data=(np.arange(100 * 37, dtype="<i4").reshape(100, 37) % 97) * 1000,
                             chunks=(16, 10), **kw)
    with new("userblock", userblock_size=512) as f:
        f.create_dataset("x", data=np.arange(1000, dtype="<i4"))
    ext = folder / "external.bin"
    ext.write_bytes(np.arange(200, dtype="<i4").tobytes())
    with new("external") as f:
        f.create_dataset("x", shape=(200,), dtype="<i4", external=[(ext.name, 0, 800)])
    with new("vds_source") as f:
        f.create_dataset("src", data=np.arange(64, dtype="f4").reshape(8, 8), chunks=(4, 4))
    layout = h5py.VirtualLayout(shape=(8, 16), dtype="f4")
    layout[:, 0:8] = h5py.VirtualSource(out["vds_source"].name, "src", shape=(8, 8))
    layout[:, 8:16] = h5py.VirtualSource(out["vds_source"].name, "src", shape=(8, 8))
    with new("vds") as f:
        f.create_virtual_dataset("v", layout, fillvalue=-1)
    from refindex.testing.portability import write_portability_zoo

    out["portability"] = folder / "portability.h5"
    write_portability_zoo(out["portability"])
    return out


def build_inputs(folder: Path) -> dict[str, Path]:
    """Every golden input, built in ``folder`` (call in a fresh process: see the module docstring)."""
    sys.path.insert(0, str(HERE))
    import nwbfiles

    from refindex.demo import write_plain_example

    _seed_object_ids()
    cwd = os.getcwd()
    os.chdir(folder)  # external links and raw storage are written relative to the files
    try:
        paths = _zoo(Path("."))
        paths = {k: folder / v for k, v in paths.items()}
        for name, path in nwbfiles.build_all(folder / "nwb").items():
            paths[f"nwb_{name}"] = path
        nwbfiles.build_many_objects(folder / "nwb" / "many.nwb")
        paths["nwb_many"] = folder / "nwb" / "many.nwb"
        write_plain_example(str(folder / "demo.h5"))  # (the demo's NWB file records when it was made)
        paths["demo_h5"] = folder / "demo.h5"
    finally:
        os.chdir(cwd)
    return paths


# ---------------------------------------------------------------- digests
def digest(refs: dict[str, Any], folders: dict[str, str], page_bytes: bool = True) -> str:
    """sha256 of the index as canonical JSON, volatile fields masked (``page_bytes=False``: the bytes
    of its pages too, for built files whose bytes differ per build where no other field looks)."""
    refs = json.loads(json.dumps(refs, allow_nan=True))
    prov = refs.get("refindex") or {}
    prov.pop("refindex_version", None)
    if not page_bytes and isinstance(prov.get("pages"), dict):
        prov["pages"].pop("data", None)
    for entry in [prov.get("source") or {}] + [e.get("refs", {}).get("refindex", {}).get("source") or {}
                                               for e in (prov.get("external") or {}).values()]:
        entry.pop("mtime", None)
        entry.pop("etag", None)
        (entry.get("fingerprint") or {}).pop("digest", None)  # some built files differ byte for byte per build
    text = json.dumps(refs, sort_keys=True, allow_nan=True, ensure_ascii=False)
    for placeholder, folder in folders.items():
        text = text.replace(folder, placeholder)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# Built inputs whose zarr v3 index (issue #14) is pinned too: every layout, type, filter and link kind
# of the zoo, the NWB files (hdmf-zarr's v3 convention, external links), and a portable v3 index.
V3_INPUTS = ("dtypes", "layouts", "filter_gzip", "filter_shuffle_fletcher32", "filter_lzf", "filter_blosc",
             "filter_zstd", "filter_lz4", "filter_bzip2", "filter_bitshuffle", "filter_scaleoffset", "userblock",
             "external", "vds", "portability", "nwb_main", "nwb_base", "nwb_linking", "nwb_hardlink")
V3_PORTABLE_INPUTS = ("portability", "filter_bitshuffle")


def compute(corpus: Path | None) -> dict[str, str]:
    """name -> digest (or "error: ..." for inputs refindex refuses) for the built files and the corpus
    (zarr v2), and for some built files as zarr v3 indexes (``v3/...``, ``v3-portable/...``)."""
    import refindex

    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="refindex-golden-") as tmp:
        folder = Path(tmp).resolve()
        inputs = {f"built/{k}": p for k, p in build_inputs(folder).items()}
        if corpus is not None and corpus.is_dir():
            for path in sorted(corpus.rglob("*")):
                if path.is_file() and path.name != "MANIFEST.tsv":
                    inputs[f"corpus/{path.relative_to(corpus).as_posix()}"] = path
        folders = {"{BUILT}": str(folder), "{CORPUS}": str(corpus.resolve()) if corpus else "\0"}
        jobs = [(name, path, {}) for name, path in inputs.items()]
        jobs += [(f"v3/built/{k}", inputs[f"built/{k}"], {"zarr_format": 3}) for k in V3_INPUTS]
        jobs += [(f"v3-portable/built/{k}", inputs[f"built/{k}"], {"zarr_format": 3, "portable": True})
                 for k in V3_PORTABLE_INPUTS]
        for name, path, kw in jobs:
            try:
                out[name] = digest(refindex.scan(str(path), **kw), folders, page_bytes=name.startswith("corpus/"))
            except refindex.RefindexError as e:
                out[name] = "error: " + " ".join(str(e).split()).replace(str(path), "{FILE}")
    return out


def compute_in_subprocess(corpus: Path | None) -> dict[str, str]:
    """:func:`compute` in a fresh interpreter (the inputs are only reproducible there)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as fh:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--compute", fh.name]
        if corpus is not None:
            cmd += ["--corpus", str(corpus)]
        # Not the caller's HDF5_PLUGIN_PATH: importing netCDF4 points it at plugins built for another libhdf5.
        env = {k: v for k, v in os.environ.items() if k != "HDF5_PLUGIN_PATH"}
        subprocess.run(cmd, check=True, cwd=HERE.parent, env=env)
        return json.loads(Path(fh.name).read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--update", action="store_true", help=f"write {DIGESTS.relative_to(HERE.parent)}")
    p.add_argument("--diff", action="store_true", help="print the names whose digest changed")
    p.add_argument("--compute", metavar="OUT.json", help=argparse.SUPPRESS)
    p.add_argument("--corpus", default=str(CORPUS))
    a = p.parse_args(argv)
    corpus = Path(a.corpus) if a.corpus and Path(a.corpus).is_dir() else None
    if a.compute:
        import warnings

        warnings.simplefilter("ignore")  # pynwb's notices while building the inputs
        Path(a.compute).write_text(json.dumps(compute(corpus), indent=1, sort_keys=True))
        return 0
    now = compute_in_subprocess(corpus)
    if a.update:
        DIGESTS.parent.mkdir(exist_ok=True)
        DIGESTS.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(now)} digests to {DIGESTS}")
        return 0
    stored = json.loads(DIGESTS.read_text())
    changed = sorted(k for k in now if k in stored and stored[k] != now[k])
    for k in changed:
        print(f"changed: {k}")
    print(f"{len(changed)} of {len(now)} differ")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
