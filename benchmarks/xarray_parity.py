"""Issue 21's table: does xarray (default decoding) show the same through an index as through h5netcdf on the file?

For every corpus file (and any extra files given) that h5netcdf opens, each group h5netcdf
opens is read both ways and compared with ``tests/xrcompare.py`` (dimensions, coordinates,
variables, dtypes, attributes, masks, values).  Routes:

* ``v2`` / ``v3``: refindex's JSON index through the kerchunk route (``"reference://"``, ``engine="zarr"``);
* ``vz``: refindex's VirtualiZarr parser, its ``ManifestStore`` opened by xarray;
* ``icechunk``: refindex's Icechunk repository of the file, a read-only session's store;
* ``kerchunk``: kerchunk's ``SingleHdf5ToZarr`` through the same route (for reference).

Each file runs in a child process (a hang or crash costs that file only).

    python benchmarks/xarray_parity.py [--routes v2,v3,vz,icechunk] [--netcdf-only] [--details] [extra files...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
if os.environ.get("REFINDEX_BASELINE"):  # another checkout's refindex package (a "before" run of the table)
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]
    sys.path.insert(0, os.environ["REFINDEX_BASELINE"])

ROUTES = ("v2", "v3", "vz", "icechunk", "kerchunk")


def open_route(route: str, path: str, tmp: str) -> Any:
    """A function group -> xarray Dataset over the index of ``path`` made by ``route``."""
    import xarray as xr

    import refindex
    from xrcompare import open_reference

    if route in ("v2", "v3"):
        refs = json.loads(json.dumps(refindex.scan(path, zarr_format=int(route[1]), on_unsupported="skip"), allow_nan=True))
        return lambda g: open_reference(refs, g)
    if route == "kerchunk":
        from kerchunk.hdf import SingleHdf5ToZarr

        refs = SingleHdf5ToZarr(path).translate()
        return lambda g: open_reference(refs, g)
    if route == "vz":
        import obstore
        from obspec_utils.registry import ObjectStoreRegistry

        import refindex.virtualizarr as rv

        store = rv.Parser(on_unsupported="skip")(rv.as_uri(path), ObjectStoreRegistry({"file://": obstore.store.LocalStore()}))
        return lambda g: xr.open_dataset(store, engine="zarr", consolidated=False, zarr_format=3,
                                         group=(g or "/").strip("/") or None)
    if route == "icechunk":
        import icechunk as ic

        from refindex.formats.icechunk import credentials_for, declared_containers

        repo = os.path.join(tmp, "repo")
        refindex.scan_to_icechunk(path, repo, on_unsupported="skip")
        storage = ic.local_filesystem_storage(repo)
        creds = credentials_for(declared_containers(ic.Repository.fetch_config(storage)), None)
        store = ic.Repository.open(storage, authorize_virtual_chunk_access=creds).readonly_session("main").store
        return lambda g: xr.open_dataset(store, engine="zarr", consolidated=False, zarr_format=3,
                                         group=(g or "/").strip("/") or None)
    raise ValueError(route)


def one_file(path: str, routes: list[str]) -> dict[str, Any]:
    """{"h5netcdf": error or None, "groups": [...], route: {"status", "differences"}} for one file."""
    warnings.simplefilter("ignore")
    from xrcompare import differences, h5netcdf_groups, open_file

    import hdf5plugin  # noqa: F401 - a user reading these files has HDF5's filter plugins loaded

    skipped: list[str] = []
    os.chdir(os.path.dirname(path))  # external raw data files are found beside the file
    try:
        groups = h5netcdf_groups(path)
        wants = {}
        for g in groups:  # a group xarray cannot open over the file itself is not compared
            try:
                wants[g] = open_file(path, None if g == "/" else g)
            except Exception as e:  # noqa: BLE001
                if g == "/":
                    raise
                skipped.append(f"{g}: {type(e).__name__}: {e}"[:200])
    except Exception as e:  # noqa: BLE001
        return {"h5netcdf": f"{type(e).__name__}: {e}"[:300]}
    out: dict[str, Any] = {"h5netcdf": None, "groups": list(wants), "groups_h5netcdf_cannot_open": skipped}
    for route in routes:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                opener = open_route(route, path, tmp)
            except Exception as e:  # noqa: BLE001
                out[route] = {"status": "no index", "differences": [f"{type(e).__name__}: {e}"[:300]]}
                continue
            diffs: list[str] = []
            failed = False
            for g, want in wants.items():
                try:
                    got = opener(None if g == "/" else g)
                    diffs += differences(want, got, g if g != "/" else "")
                except Exception as e:  # noqa: BLE001
                    failed = True
                    diffs.append(f"{g}: xarray cannot open it: {type(e).__name__}: {e}"[:300])
            out[route] = {"status": "fails" if failed else ("differs" if diffs else "identical"), "differences": diffs}
    return out


def run_child(path: str, routes: list[str], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", path, "--routes", ",".join(routes)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"h5netcdf": None, **{r: {"status": "fails", "differences": ["timed out"]} for r in routes}}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"h5netcdf": None, **{r: {"status": "fails", "differences": [f"child died: {done.stderr[-300:]}"]}
                                     for r in routes}}


def corpus_files(netcdf_only: bool) -> list[str]:
    from corpus import CORPUS, manifest_rows

    rows = [r for r in manifest_rows() if not r["notes"].startswith("NOT HDF5")]
    if netcdf_only:
        rows = [r for r in rows if is_netcdf(r)]
    return [str(CORPUS / r["relpath"]) for r in rows]


def is_netcdf(row: dict[str, str]) -> bool:
    """A netCDF-4 file: named .nc, or carrying netCDF-C's _NCProperties (the corpus manifest's notes say)."""
    return row["relpath"].endswith(".nc") or "_NCProperties" in row["notes"]


def netcdf_paths() -> set[str]:
    from corpus import CORPUS, manifest_rows

    return {str(CORPUS / r["relpath"]) for r in manifest_rows() if is_netcdf(r)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--routes", default="v2,v3,vz,icechunk")
    ap.add_argument("--netcdf-only", action="store_true")
    ap.add_argument("--details", action="store_true", help="print every difference")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write the per-file results here")
    ap.add_argument("--only", help="corpus files whose path contains one of these (comma-separated)")
    args = ap.parse_args()
    routes = args.routes.split(",")
    if args.child:
        print(json.dumps(one_file(args.child, routes)))
        return
    files = corpus_files(args.netcdf_only) + [os.path.abspath(f) for f in args.files]
    if args.only:
        files = [f for f in files if any(x in f for x in args.only.split(","))]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = dict(zip(files, pool.map(lambda p: run_child(p, routes, args.timeout), files)))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    report(results, routes, args.details)


def report(results: dict[str, dict[str, Any]], routes: list[str], details: bool) -> None:
    opened = {p: r for p, r in results.items() if r.get("h5netcdf") is None}
    refused = sorted(p for p, r in results.items() if r.get("h5netcdf") is not None)
    netcdf = {p for p in opened if p in netcdf_paths() or p.endswith(".nc")}
    print(f"{len(results)} files; h5netcdf opens {len(opened)} ({len(netcdf)} .nc); cannot open {len(refused)}")
    print("| route | .nc files identical | all files: identical / differ / fail |")
    print("|---|---|---|")
    for route in routes:
        st = {p: r[route]["status"] for p, r in opened.items() if route in r}
        nc = sum(1 for p in netcdf if st.get(p) == "identical")
        counts = [sum(1 for s in st.values() if s == k) for k in ("identical", "differs")]
        fail = sum(1 for s in st.values() if s not in ("identical", "differs"))
        print(f"| {route} | {nc} of {len(netcdf)} | {counts[0]} / {counts[1]} / {fail} |")
    for route in routes:
        bad = {p: r[route] for p, r in opened.items() if route in r and r[route]["status"] != "identical"}
        if bad:
            print(f"\n{route}: {len(bad)} not identical")
            for p, r in sorted(bad.items()):
                d = r["differences"]
                print(f"  {os.path.relpath(p, os.path.join(HERE, '..', '..', '..', 'shared', 'corpus'))}: {r['status']}, "
                      f"{len(d)} difference(s); first: {d[0] if d else ''}"[:400])
                if details:
                    for x in d[1:40]:
                        print(f"      {x}"[:300])
    if refused:
        print("\nh5netcdf cannot open:")
        for p in refused:
            print(f"  {p}: {results[p]['h5netcdf'][:150]}")


if __name__ == "__main__":
    main()
