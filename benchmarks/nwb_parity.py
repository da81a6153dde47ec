"""NWB readers over an index, against ``NWBHDF5IO`` on the file: a table per reader (issue 22).

For every NWB file of the test suite (tests/nwbfiles.py: pynwb; tests/nwbwriters.py:
AqNWB, MIES, MatNWB and NeuroConv habits; the corpus' files written by old pynwb
versions), each reader opens an index of the file and the NWBFile it returns is compared
with ``NWBHDF5IO(file).read()`` field by field (tests/nwbcompare.py):

* ``NWBZarrV2IO``: stock hdmf-zarr over the v2 JSON index (fsspec reference FS + zarr FsspecStore);
* ``NWBZarrIO v3``: stock hdmf-zarr over the v3 JSON index, the same way;
* ``NWBZarrIO icechunk``: stock hdmf-zarr over an Icechunk session's store;
* ``open_nwb v2`` / ``open_nwb v3`` / ``open_nwb icechunk``: ``refindex.open_nwb`` with its default reader;
* ``open_nwb zarr ...``: the same with ``reader="zarr"`` (hdmf-zarr over the index, refindex's attribute types).

Each file and reader runs in a fresh process (extensions registered by one file never help
another).  Usage::

    python benchmarks/nwb_parity.py [--out results.json]

To measure another refindex (e.g. main before a change), put its package first on
``PYTHONPATH``; the test files always come from this checkout's tests/.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
# "open_nwb ...": its default reader (the h5py road, or the zarr road for files linking to others);
# "open_nwb zarr ...": reader="zarr", hdmf-zarr over the index with refindex's attribute types and linked indexes
READERS = ("NWBZarrV2IO", "NWBZarrIO v3", "NWBZarrIO icechunk", "open_nwb v2", "open_nwb v3", "open_nwb icechunk",
           "open_nwb zarr v2", "open_nwb zarr v3", "open_nwb zarr icechunk")
FAMILY = {"main": "pynwb", "base": "pynwb", "linking": "pynwb (external links)", "hardlink": "pynwb + h5py",
          "aqnwb": "AqNWB", "mies": "MIES", "matnwb": "MatNWB", "neuroconv": "NeuroConv + extension",
          "neuroconv_ttl": "NeuroConv (real file)"}


def build(folder: Path) -> dict[str, str]:
    sys.path.insert(0, str(TESTS))
    import nwbfiles
    import nwbwriters
    from corpus import CORPUS

    warnings.simplefilter("ignore")
    files = {k: str(v) for k, v in nwbfiles.build_all(folder).items()}
    files.update({k: str(v) for k, v in nwbwriters.build_all(folder).items()})
    manifest = CORPUS / "MANIFEST.tsv"
    if manifest.exists():
        with open(manifest) as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                if row["relpath"].startswith("pynwb/"):
                    files[row["relpath"]] = str(CORPUS / row["relpath"])
    return files


def _store(reader: str, path: str, work: Path):
    import fsspec
    import zarr

    import refindex

    if reader.endswith("icechunk"):
        import icechunk as ic

        from refindex.formats.icechunk import credentials_for, declared_containers

        repo = work / "repo"
        refindex.scan_to_icechunk(path, repo)
        storage = ic.local_filesystem_storage(str(repo))
        containers = declared_containers(ic.Repository.fetch_config(storage))
        r = ic.Repository.open(storage, authorize_virtual_chunk_access=credentials_for(containers, None) or None)
        return repo, r.readonly_session(branch="main").store
    fmt = 3 if reader.endswith("v3") else 2
    refs = json.loads(json.dumps(refindex.scan(path, zarr_format=fmt), allow_nan=True))
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True)
    return refs, zarr.storage.FsspecStore(fs, read_only=True, path="")


def child(reader: str, path: str) -> dict[str, str]:
    """One file through one reader: {"status": "equal" | "differs" | "error", "detail"}."""
    import gc

    sys.path.insert(0, str(TESTS))
    import nwbcompare
    from pynwb import NWBHDF5IO

    import refindex

    warnings.simplefilter("ignore")
    ios = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            index, store = _store(reader, path, Path(tmp))
            if reader.startswith("open_nwb"):
                nwb = refindex.open_nwb(index, **({"reader": "zarr"} if reader.startswith("open_nwb zarr") else {}))
                ios.append(nwb.refindex_io)
            else:
                if reader == "NWBZarrV2IO":
                    from hdmf_zarr.nwb_zarrv2 import NWBZarrV2IO as cls
                else:
                    from hdmf_zarr.nwb import NWBZarrIO as cls
                io = cls(path=store, mode="r")
                ios.append(io)
                nwb = io.read()
            hio = NWBHDF5IO(path, "r")
            ios.append(hio)
            try:
                nwbcompare.assert_same_nwb(hio.read(), nwb)
            except AssertionError as e:
                return {"status": "differs", "detail": str(e)[:300]}
            return {"status": "equal", "detail": ""}
    except Exception as e:  # noqa: BLE001 - the table reports what each reader raised
        return {"status": "error", "detail": f"{type(e).__name__}: {str(e)[:300]}"}
    finally:
        for io in ios:
            try:
                io.close()
            except Exception:  # noqa: BLE001
                pass
        gc.collect()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=2)
    ap.add_argument("--out")
    ap.add_argument("--readers", default=",".join(READERS))
    args = ap.parse_args()
    if args.child:
        print("@@result " + json.dumps(child(*args.child)))
        return
    readers = args.readers.split(",")
    results: dict[str, dict[str, dict[str, str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = build(Path(tmp))
        for name, path in files.items():
            results[name] = {}
            for reader in readers:
                p = subprocess.run([sys.executable, __file__, "--child", reader, path], capture_output=True,
                                   text=True, timeout=600, env=os.environ)
                line = [ln for ln in p.stdout.splitlines() if ln.startswith("@@result ")]
                results[name][reader] = (json.loads(line[-1][9:]) if line else
                                         {"status": "error", "detail": (p.stderr.strip().splitlines() or ["?"])[-1]})
                print(f"{name:40s} {reader:20s} {results[name][reader]['status']:8s} "
                      f"{results[name][reader]['detail'][:150]}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    for reader in readers:
        ok = sum(r[reader]["status"] == "equal" for r in results.values())
        print(f"\n{reader}: {ok} / {len(results)} files equal to NWBHDF5IO")
        print("| file | writer | result |\n|---|---|---|")
        for name, r in results.items():
            family = FAMILY.get(name, "old pynwb (corpus)")
            res = r[reader]
            print(f"| {name} | {family} | {res['status']}{': ' + res['detail'][:120] if res['detail'] else ''} |")


if __name__ == "__main__":
    main()
