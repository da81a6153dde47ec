"""``refindex demo``: build an example NWB file and a plain HDF5 file, index both, read back."""

from __future__ import annotations

import os
import tempfile
import time
import warnings

import h5py
import numpy as np


def write_plain_example(path: str) -> None:
    """A small HDF5 file with the layouts and types an index has to handle."""
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


def write_nwb_example(path: str) -> bool:
    """A pynwb file with ecephys, units, trials and epochs; False if pynwb is missing."""
    try:
        from datetime import datetime, timezone

        from pynwb import NWBHDF5IO, NWBFile, TimeSeries
        from pynwb.ecephys import ElectricalSeries
    except ImportError:
        return False
    rng = np.random.default_rng(1)
    nwb = NWBFile("refindex demo session", "demo-0001", datetime(2026, 1, 1, tzinfo=timezone.utc))
    device = nwb.create_device("probe")
    group = nwb.create_electrode_group("shank0", "demo shank", "CA1", device)
    for i in range(8):
        nwb.add_electrode(location="CA1", group=group, x=float(i), y=0.0, z=0.0)
    region = nwb.create_electrode_table_region(list(range(8)), "all electrodes")
    data = (rng.normal(0, 50, (30_000, 8))).astype("i2")
    from hdmf.backends.hdf5 import H5DataIO

    es = ElectricalSeries(name="raw", data=H5DataIO(data, compression="gzip", chunks=(3000, 8)),
                          electrodes=region, rate=30_000.0)
    nwb.add_acquisition(es)
    speed = TimeSeries(name="speed", data=rng.random(1000), unit="m/s", rate=100.0)
    nwb.add_acquisition(speed)
    for u in range(3):
        nwb.add_unit(spike_times=np.sort(rng.random(20 + u) * 10))
    nwb.add_trial(start_time=0.0, stop_time=1.0)
    nwb.add_trial(start_time=1.0, stop_time=2.0)
    nwb.add_epoch(0.0, 5.0, ["demo"], [speed])
    with NWBHDF5IO(path, "w") as io:
        io.write(nwb)
    return True


def run_demo(folder: str | None = None) -> None:
    """Write, index, verify and read the examples in ``folder`` (kept), or in a temporary folder removed at the end."""
    if folder is not None:
        os.makedirs(folder, exist_ok=True)
        _demo(folder)
        print(f"the files are in {folder}")
        return
    with tempfile.TemporaryDirectory(prefix="refindex-demo-") as tmp:
        _demo(tmp)
    print(f"removed {tmp} (refindex demo --dir FOLDER keeps the files)")


def _demo(folder: str) -> None:
    from . import info, open, open_nwb, scan_to_file, verify

    print(f"refindex demo in {folder}\n")
    plain = os.path.join(folder, "example.h5")
    write_plain_example(plain)
    jobs = [("plain HDF5", plain)]
    nwb_path = os.path.join(folder, "example.nwb")
    if write_nwb_example(nwb_path):
        jobs.append(("NWB (pynwb)", nwb_path))
    for label, path in jobs:
        out = path + ".refs.json"
        t0 = time.perf_counter()
        scan_to_file(path, out)
        dt = time.perf_counter() - t0
        s = info(out)
        print(f"== {label}: {os.path.basename(path)} ({os.path.getsize(path):,} bytes)")
        print(f"   indexed in {dt * 1000:.0f} ms -> {os.path.basename(out)} ({os.path.getsize(out):,} bytes), "
              f"convention {s['convention']}")
        print(f"   {s['groups']} groups, {s['arrays']} arrays, {s['chunks_referenced']} chunks referenced "
              f"({s['bytes_referenced']:,} bytes stay in the file), {s['inline_chunks']} inline "
              f"({s['inline_bytes']:,} bytes)")
        report = verify(path, out)
        print(f"   verify: {report.summary().split(': ', 1)[1]}")
        root = open(out)
        if label == "plain HDF5":
            temp = root["measurements/temperature"]
            print(f"   zarr read measurements/temperature[:3, :4] (shape {temp.shape}, chunks {temp.chunks}):")
            print("   " + np.array2string(temp[:3, :4], precision=2).replace("\n", "\n   "))
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                nwbfile = open_nwb(out)
            raw = nwbfile.acquisition["raw"]
            print(f"   pynwb via hdmf-zarr: session '{nwbfile.session_description}', "
                  f"acquisition {sorted(nwbfile.acquisition)}, {len(nwbfile.units)} units, "
                  f"{len(nwbfile.trials)} trials")
            print(f"   raw.data[:2] (lazy zarr array over the HDF5 bytes): {raw.data[:2].tolist()}")
        print()
    print("done: such .refs.json files open with refindex.open(...), refindex.open_nwb(...) or any fsspec+zarr reader.")
