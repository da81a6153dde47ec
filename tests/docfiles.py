"""The files every documentation page's examples run against (see tests/test_docs.py).

``build(folder)`` writes, once per test session:

* ``session.nwb``  - a small pynwb file: acquisition "ElectricalSeries" (chunked, gzip) with its
  electrodes table, units with spike times, and trials;
* ``climate.nc``, ``climate2.nc`` - netCDF-4 files (written with netCDF4) with an unlimited ``time``
  dimension, consecutive times (climate2.nc continues climate.nc), coordinates ``lat``/``lon``, a
  float variable with ``_FillValue`` and missing values (``tas``) and a packed int16 variable with
  ``scale_factor``/``add_offset``/``_FillValue`` (``pr``);
* ``data.h5``      - plain HDF5: a chunked gzip dataset ``/data`` (400 x 500 float32, 20 chunks, each
  referenced, not copied in) and a group ``/group`` with a small dataset ``values``.

Small on purpose: a page's examples should take a second, not a minute.
"""

from __future__ import annotations

import warnings
from datetime import datetime, timezone
from pathlib import Path

import h5py
import numpy as np

FILES = ("session.nwb", "climate.nc", "climate2.nc", "data.h5")
DAYS_PER_FILE = 6


def write_session(path: Path) -> None:
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
    import netCDF4

    rng = np.random.default_rng(first_day)
    with netCDF4.Dataset(str(path), "w", format="NETCDF4") as ds:
        ds.title = "refindex documentation climate file"
        ds.createDimension("time", None)
        ds.createDimension("lat", 3)
        ds.createDimension("lon", 4)
        time = ds.createVariable("time", "f8", ("time",))
        time.units, time.calendar, time.standard_name = "days since 2000-01-01", "standard", "time"
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
        time[:] = np.arange(first_day, first_day + DAYS_PER_FILE, dtype="f8")
        t = 280.0 + 10.0 * rng.random((DAYS_PER_FILE, 3, 4))
        t[0, 0, 0] = np.nan  # a missing value: stored as the fill value
        tas[:] = np.ma.masked_invalid(t.astype("f4"))
        rain = np.ma.masked_array(np.round(rng.random((DAYS_PER_FILE, 3, 4)) * 20, 2))
        rain[1, 1, 1] = np.ma.masked
        pr[:] = rain  # packed by netCDF4 (auto scale on write)


def write_plain(path: Path) -> None:
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "refindex documentation file"
        values = np.random.default_rng(5).normal(0, 1, (400, 500)).astype("f4")  # chunks too big to inline
        f.create_dataset("data", data=values, chunks=(100, 100), compression="gzip")
        g = f.create_group("group")
        g.attrs["note"] = "a group with a small dataset"
        g.create_dataset("values", data=np.arange(10, dtype="i8"))


def build(folder: Path) -> dict[str, Path]:
    """Write the four files into ``folder``; returns name -> path."""
    folder = Path(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_session(folder / "session.nwb")
    write_climate(folder / "climate.nc", 0)
    write_climate(folder / "climate2.nc", DAYS_PER_FILE)
    write_plain(folder / "data.h5")
    return {name: folder / name for name in FILES}
