"""``refindex demo``: write the example files README's quick starts and docs/ run on, index them, read back.

The files (:data:`EXAMPLE_FILES`, written by :func:`write_examples`) are the ones the test
suite runs every example of README.md and docs/ against (tests/docfiles.py), so what the
documentation shows runs as written in the folder ``make demo`` leaves (``demo/``):

* ``session.nwb``  - a small pynwb file: acquisition "ElectricalSeries" (chunked, gzip) with its
  electrodes table, units with spike times, and trials;
* ``climate.nc``, ``climate2.nc`` - netCDF-4 files (written with netCDF4) with an unlimited ``time``
  dimension, consecutive times (climate2.nc continues climate.nc), coordinates ``lat``/``lon``, a
  float variable with ``_FillValue`` and missing values (``tas``) and a packed int16 variable with
  ``scale_factor``/``add_offset``/``_FillValue`` (``pr``);
* ``data.h5``      - plain HDF5: a chunked gzip dataset ``/data`` (400 x 500 float32, 20 chunks, each
  referenced, not copied in) and a group ``/group`` with a small dataset ``values``.

Small on purpose: an example should take a second, not a minute.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import h5py
import numpy as np

EXAMPLE_FILES = ("session.nwb", "climate.nc", "climate2.nc", "data.h5")
DAYS_PER_FILE = 6


def write_session(path: Path) -> None:
    """The NWB example (needs pynwb: the ``nwb`` extra)."""
    from hdmf.backends.hdf5 import H5DataIO
    from pynwb import NWBHDF5IO, NWBFile
    from pynwb.ecephys import ElectricalSeries

    rng = np.random.default_rng(25)
    nwb = NWBFile("refindex documentation session", "docs-0001", datetime(2026, 1, 1, tzinfo=timezone.utc))
    device = nwb.create_device("probe")
    shank = nwb.create_electrode_group("shank0", "example shank", "CA1", device)
    for i in range(4):
        nwb.add_electrode(location="CA1", group=shank, x=float(i), y=0.0, z=0.0)
    region = nwb.create_electrode_table_region(list(range(4)), "all electrodes")
    data = rng.normal(0, 50, (6000, 4)).astype("i2")
    nwb.add_acquisition(ElectricalSeries(name="ElectricalSeries", data=H5DataIO(data, compression="gzip",
                                                                                chunks=(1000, 4)),
                                         electrodes=region, rate=1000.0))
    for u in range(3):
        nwb.add_unit(spike_times=np.sort(rng.random(10 + u) * 6.0))
    for t in range(3):
        nwb.add_trial(start_time=2.0 * t, stop_time=2.0 * t + 1.5)
    with NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)


def write_climate(path: Path, first_day: int) -> None:
    """A netCDF-4 example of :data:`DAYS_PER_FILE` days from ``first_day`` (needs netCDF4)."""
    import netCDF4

    rng = np.random.default_rng(first_day)
    with netCDF4.Dataset(str(path), "w", format="NETCDF4") as ds:
        ds.title = "refindex documentation climate file"
        ds.createDimension("time", None)
        ds.createDimension("lat", 3)
        ds.createDimension("lon", 4)
        time_ = ds.createVariable("time", "f8", ("time",))
        time_.units, time_.calendar, time_.standard_name = "days since 2000-01-01", "standard", "time"
        lat = ds.createVariable("lat", "f4", ("lat",))
        lat.units = "degrees_north"
        lon = ds.createVariable("lon", "f4", ("lon",))
        lon.units = "degrees_east"
        tas = ds.createVariable("tas", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=(2, 3, 4),
                                fill_value=np.float32(-999.0))
        tas.units, tas.long_name = "K", "near-surface air temperature"
        pr = ds.createVariable("pr", "i2", ("time", "lat", "lon"), zlib=True, chunksizes=(2, 3, 4),
                               fill_value=np.int16(-32767))
        pr.units, pr.scale_factor, pr.add_offset = "mm/day", np.float32(0.01), np.float32(0.0)
        lat[:] = [-30.0, 0.0, 30.0]
        lon[:] = [0.0, 90.0, 180.0, 270.0]
        time_[:] = np.arange(first_day, first_day + DAYS_PER_FILE, dtype="f8")
        t = 280.0 + 10.0 * rng.random((DAYS_PER_FILE, 3, 4))
        t[0, 0, 0] = np.nan  # a missing value: stored as the fill value
        tas[:] = np.ma.masked_invalid(t.astype("f4"))
        rain = np.ma.masked_array(np.round(rng.random((DAYS_PER_FILE, 3, 4)) * 20, 2))
        rain[1, 1, 1] = np.ma.masked
        pr[:] = rain  # packed by netCDF4 (auto scale on write)


def write_plain(path: Path) -> None:
    """The plain HDF5 example."""
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "refindex documentation file"
        values = np.random.default_rng(5).normal(0, 1, (400, 500)).astype("f4")  # chunks too big to inline
        f.create_dataset("data", data=values, chunks=(100, 100), compression="gzip")
        g = f.create_group("group")
        g.attrs["note"] = "a group with a small dataset"
        g.create_dataset("values", data=np.arange(10, dtype="i8"))


def write_examples(folder: str | os.PathLike) -> dict[str, Path]:
    """Write :data:`EXAMPLE_FILES` into ``folder``; returns name -> path (ImportError without pynwb or netCDF4)."""
    folder = Path(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_session(folder / "session.nwb")
    write_climate(folder / "climate.nc", 0)
    write_climate(folder / "climate2.nc", DAYS_PER_FILE)
    write_plain(folder / "data.h5")
    return {name: folder / name for name in EXAMPLE_FILES}


def write_plain_example(path: str) -> None:
    """A small HDF5 file with the layouts and types an index has to handle (tests/golden.py)."""
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "refindex demo"
        g = f.create_group("measurements")
        g.create_dataset("temperature", data=rng.normal(20, 3, (2000, 64)).astype("f4"),
                         chunks=(250, 64), compression="gzip", shuffle=True)
        g.create_dataset("counts", data=np.arange(100_000, dtype="i8"))  # contiguous
        g.create_dataset("labels", data=["alpha", "beta", "gamma"], dtype=h5py.string_dtype())
        t = f.create_dataset("time", data=np.arange(2000, dtype="f8"))
        t.make_scale("time")
        g["temperature"].dims[0].attach_scale(t)


def run_demo(folder: str | None = None) -> None:
    """Write, index, verify and read the examples in ``folder`` (kept), or in a temporary folder removed at the end."""
    if folder is not None:
        os.makedirs(folder, exist_ok=True)
        _demo(folder)
        print(f"the files are in {folder}: README's quick starts run there")
    else:
        with tempfile.TemporaryDirectory(prefix="refindex-demo-") as tmp:
            _demo(tmp)
        print(f"removed {tmp} (refindex demo --dir FOLDER keeps the files)")
    print(how_to_run())


def how_to_run() -> str:
    """How to run the ``refindex`` command of this installation from the shell the demo was started in."""
    bin_dir = Path(sys.executable).parent
    command = bin_dir / "refindex"
    on_path = shutil.which("refindex")
    if on_path and (not command.exists() or Path(on_path).resolve() == command.resolve()):
        return "the command line: refindex --help"
    if not command.exists():  # (a script folder elsewhere, and not on the PATH)
        return f"the command line: {sys.executable} -m refindex --help"
    shown = os.path.relpath(command) if command.resolve().is_relative_to(Path.cwd().resolve()) else str(command)
    text = f"the command line: {shown} --help (it is not on your PATH"
    activate = bin_dir / "activate"
    if activate.exists():
        shown_activate = os.path.relpath(activate) if shown != str(command) else str(activate)
        text += f"; after `source {shown_activate}` it is `refindex`"
    return text + ")"


def _demo(folder: str) -> None:
    print(f"refindex demo in {folder}\n")
    try:
        paths = write_examples(folder)
    except ImportError as e:  # pynwb (the nwb extra) or netCDF4: the plain file alone
        print(f"(only data.h5: {e.name} is not installed)\n")
        write_plain(Path(folder) / "data.h5")
        paths = {"data.h5": Path(folder) / "data.h5"}
    for name, path in paths.items():
        if name == "climate2.nc":
            continue
        _index_and_read(name, str(path))
    print("done: such .refs.json files open with refindex.open(...), refindex.open_nwb(...) or any fsspec+zarr reader.")


def _index_and_read(name: str, path: str) -> None:
    """Index one example, summarise the index, verify it against h5py and read a little through it."""
    from . import info, open, open_nwb, scan_to_file, verify

    out = path + ".refs.json"
    t0 = time.perf_counter()
    scan_to_file(path, out)
    dt = time.perf_counter() - t0
    s = info(out)
    print(f"== {name} ({os.path.getsize(path):,} bytes)")
    print(f"   indexed in {dt * 1000:.0f} ms -> {os.path.basename(out)} ({os.path.getsize(out):,} bytes), "
          f"convention {s['convention']}")
    print(f"   {s['groups']} groups, {s['arrays']} arrays, {s['chunks_referenced']} chunks referenced "
          f"({s['bytes_referenced']:,} bytes stay in the file), {s['inline_chunks']} inline "
          f"({s['inline_bytes']:,} bytes)")
    print(f"   verify: {verify(path, out).summary().split(': ', 1)[1]}")
    if name.endswith(".nwb"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nwbfile = open_nwb(out)
        series = nwbfile.acquisition["ElectricalSeries"]
        print(f"   pynwb: session '{nwbfile.session_description}', acquisition {sorted(nwbfile.acquisition)}, "
              f"{len(nwbfile.units)} units, {len(nwbfile.trials)} trials")
        print(f"   ElectricalSeries.data[:2] (lazy zarr array over the HDF5 bytes): {series.data[:2].tolist()}")
    elif name.endswith(".nc"):
        _read_climate(open(out))
    else:
        array = open(out)["data"]
        print(f"   zarr read data[0, :4] (shape {array.shape}, chunks {array.chunks}): "
              + np.array2string(array[0, :4], precision=3))
    print()


def _read_climate(root) -> None:
    """xarray (default decoding) over the index, as README's quick start 2 does; zarr alone without xarray."""
    try:
        import xarray as xr
    except ImportError:
        print(f"   zarr read tas[1, 0, :4] (raw values; xarray is not installed): {root['tas'][1, 0, :4].tolist()}")
        return
    ds = xr.open_zarr(root.store)
    print(f"   xarray: {dict(ds.sizes)}, mean tas {float(ds['tas'].mean()):.2f} {ds['tas'].attrs['units']} "
          f"({int(ds['tas'].isnull().sum())} missing), time {ds['time'].values[0].astype('datetime64[D]')} .. "
          f"{ds['time'].values[-1].astype('datetime64[D]')}")
