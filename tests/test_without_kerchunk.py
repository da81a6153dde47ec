"""refindex's core runs without kerchunk: kerchunk is a peer the tests and benchmarks compare with (the
``test`` and ``bench`` extras install it), not a dependency.

A fresh interpreter, and every worker process it starts, gets a ``sitecustomize`` (on ``PYTHONPATH``)
that makes kerchunk unimportable and drops its entry points (its numcodecs codecs, its xarray
backend), as if it were not installed.  There ``import refindex``, a scan read back through
``refindex.open``, and ``batch --combine`` on local workers (the API into parquet, the CLI into JSON)
must give what h5py and ``xr.open_mfdataset`` read from the files, and kerchunk is never imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")
pytest.importorskip("h5netcdf")

NOT_INSTALLED = textwrap.dedent('''
    """kerchunk as if not installed: unimportable, its entry points gone (tests/test_without_kerchunk.py)."""
    import importlib.abc
    import importlib.metadata as md
    import sys


    class NoKerchunk(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".", 1)[0] == "kerchunk":
                raise ModuleNotFoundError(f"No module named {name!r} (not installed in this environment)")
            return None


    sys.meta_path.insert(0, NoKerchunk())
    _entry_points = md.entry_points


    def entry_points(**params):
        return md.EntryPoints([ep for ep in _entry_points(**params) if not ep.value.startswith("kerchunk")])


    md.entry_points = entry_points
''')

CORE = textwrap.dedent('''
    import sys
    import warnings

    import h5py
    import numpy as np
    import xarray as xr

    import refindex
    from refindex.cli import main

    g = refindex.open(refindex.scan("plain.h5"))
    with h5py.File("plain.h5") as f:
        for name in ("chunked", "contiguous"):
            np.testing.assert_array_equal(g[name][...], f[name][...])
    files = ["c.nc", "a.nc", "b.nc"]  # unsorted: the combine orders them by time
    report = refindex.run_batch(files, output="idx", workers=2, progress=False, combine="all.parq")
    assert report.ok and len(report.indexed) == 3, report.summary()
    assert main(["batch", *files, "-o", "idx-cli", "--combine", "all.json", "--no-progress", "--workers", "2"]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        want = xr.open_mfdataset(files, engine="h5netcdf", combine="by_coords").load()
    for out in ("all.parq", "all.json"):
        got = xr.open_zarr(refindex.open(out).store, consolidated=out.endswith(".parq")).load()
        xr.testing.assert_identical(got, want)
    assert "kerchunk" not in sys.modules, "refindex imported kerchunk"
    print("core ok without kerchunk")
''')


def _netcdf(path, start: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    ds = xr.Dataset({"tas": (("time", "x"), rng.standard_normal((4, 6)).astype("f4"))},
                    coords={"time": pd.date_range(start, periods=4), "x": np.arange(6)})
    ds.to_netcdf(path, engine="h5netcdf", encoding={"tas": {"chunksizes": (2, 6), "zlib": True}})


def test_scan_open_and_combine_run_without_kerchunk(tmp_path):
    import h5py

    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f.create_dataset("chunked", data=np.arange(4000).reshape(40, 100), chunks=(8, 50), compression="gzip")
        f.create_dataset("contiguous", data=np.linspace(0, 1, 30))
    for i, name in enumerate("abc"):
        _netcdf(tmp_path / f"{name}.nc", f"2000-01-{1 + 4 * i:02d}", i)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NOT_INSTALLED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
    blocked = subprocess.run([sys.executable, "-c", "import kerchunk"], env=env, capture_output=True, text=True)
    assert blocked.returncode != 0 and "not installed in this environment" in blocked.stderr  # so are the workers
    run = subprocess.run([sys.executable, "-c", CORE], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "core ok without kerchunk" in run.stdout
