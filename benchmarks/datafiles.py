"""The benchmark inputs, built once into benchmarks/out/ and reused while present.

``many_chunks``: one 2-D float32 dataset cut into tiny gzip chunks (P1: index size and
scan speed are dominated by the number of chunks).  ``nwb``: a pynwb-written session
of about 120 MB (P2/P3: the metadata layout pynwb/h5py produce, spread over a file
whose bulk is data).  ``nwb_many_objects``: a ~33 MB session with hundreds of objects
(P4: opening cost grows with the number of objects, as in large DANDI files).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "out"


def _atomic(path: Path, build) -> Path:
    """Build into a temporary name and rename, so an interrupted build is never reused."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        tmp.unlink()
    build(tmp)
    os.replace(tmp, path)
    return path


def _atomic_nwb(path: Path, build) -> Path:
    """:func:`_atomic` for pynwb, which wants a .nwb name: build under a temporary .nwb name."""
    if path.exists():
        return path
    tmp = path.with_name("tmp_" + path.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    if tmp.exists():
        tmp.unlink()
    build(tmp)
    os.replace(tmp, path)
    return path


def many_chunks(rows: int = 2000, cols: int = 1000, chunk: int = 2, folder: Path = OUT) -> Path:
    """``rows x cols`` float32, ``chunk x chunk`` gzip chunks (defaults: 500,000 chunks)."""
    import h5py

    def build(tmp: Path) -> None:
        rng = np.random.default_rng(1)
        data = np.round(rng.standard_normal((rows, cols)), 2).astype("f4")
        with h5py.File(tmp, "w") as f:
            f.create_dataset("data", data=data, chunks=(chunk, chunk), compression="gzip")

    return _atomic(folder / f"many_chunks_{rows}x{cols}_c{chunk}.h5", build)


def many_datasets(count: int = 2000, length: int = 100, folder: Path = OUT) -> Path:
    """One group of ``count`` float32 datasets of ``length`` values (P6: VirtualiZarr's cost per array).

    Half are contiguous, half in gzip chunks of 25, all on one dimension scale ``x``, as a
    netCDF-4 file with many variables is laid out.
    """
    import h5py

    def build(tmp: Path) -> None:
        rng = np.random.default_rng(2)
        with h5py.File(tmp, "w", libver="latest") as f:
            x = f.create_dataset("x", data=np.arange(length, dtype="f8"))
            x.make_scale("x")
            for i in range(count):
                kw = {"chunks": (25,), "compression": "gzip"} if i % 2 else {}
                d = f.create_dataset(f"v{i:04d}", data=rng.standard_normal(length).astype("f4"), **kw)
                d.dims[0].attach_scale(x)
                d.attrs["units"] = "m"

    return _atomic(folder / f"many_datasets_{count}x{length}.h5", build)


def huge_chunks(rows: int = 10_000, cols: int = 1_000, folder: Path = OUT) -> Path:
    """``rows x cols`` uint8 in 1x1 chunks (defaults: 10^7 chunks), built in seconds."""
    from refindex.testing import write_one_byte_chunks

    return _atomic(folder / f"huge_chunks_{rows}x{cols}.h5", lambda tmp: write_one_byte_chunks(tmp, rows, cols))


def _ecephys(f, rng: np.random.Generator, channels: int, samples: int):
    """A probe with ``channels`` electrodes on 4 shanks and a gzip ElectricalSeries of ``samples`` rows;
    returns the electrodes' table region."""
    from hdmf.backends.hdf5 import H5DataIO
    from pynwb.ecephys import ElectricalSeries

    dev = f.create_device("probe", description="silicon probe")
    groups = [f.create_electrode_group(f"shank{i}", description=f"shank {i}", location="CA1", device=dev)
              for i in range(4)]
    for i in range(channels):
        f.add_electrode(x=float(i), y=2.0 * i, z=0.0, location="CA1", group=groups[i * 4 // channels],
                        filtering="none")
    region = f.create_electrode_table_region(list(range(channels)), "all electrodes")
    raw = rng.integers(-2000, 2000, size=(samples, channels), dtype=np.int16)
    f.add_acquisition(ElectricalSeries(name="ElectricalSeries", electrodes=region, rate=30000.0,
                                       data=H5DataIO(raw, compression="gzip", chunks=(min(10000, samples), channels))))
    return region


def nwb(samples: int = 300_000, channels: int = 32, frames: int = 850, folder: Path = OUT) -> Path:
    """A pynwb session: ecephys (raw ``samples x channels`` int16 in (10000, channels) gzip
    chunks, LFP), units, trials, epochs, and ophys (a ``frames`` x 256 x 256 uint16 movie,
    segmentation, fluorescence).  Defaults give about 120 MB."""
    from hdmf.backends.hdf5 import H5DataIO
    from pynwb import NWBHDF5IO, NWBFile
    from pynwb.ecephys import LFP, ElectricalSeries
    from pynwb.ophys import Fluorescence, ImageSegmentation, OpticalChannel, RoiResponseSeries, TwoPhotonSeries

    def build(tmp: Path) -> None:
        rng = np.random.default_rng(2)
        start = datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
        f = NWBFile(session_description="refindex benchmark session", identifier="bench-nwb",
                    session_start_time=start)
        region = _ecephys(f, rng, channels, samples)
        ecephys = f.create_processing_module("ecephys", "extracellular processing")
        lfp_data = rng.standard_normal((samples // 30, channels)).astype("f4")
        ecephys.add(LFP(electrical_series=ElectricalSeries(
            name="LFP", electrodes=region, rate=1000.0,
            data=H5DataIO(lfp_data, compression="gzip", chunks=(min(5000, samples // 30), channels)))))
        for u in range(40):
            f.add_unit(spike_times=np.sort(rng.uniform(0, samples / 30000.0, 200 + u)),
                       electrodes=[u % channels])
        f.add_trial_column("correct", "whether the trial was correct")
        for i in range(100):
            f.add_trial(start_time=i * 0.1, stop_time=i * 0.1 + 0.08, correct=bool(i % 2))
        for i in range(5):
            f.add_epoch(i * 2.0, i * 2.0 + 1.5, [f"epoch{i}"])
        scope = f.create_device("microscope", description="2p scope")
        plane = f.create_imaging_plane("plane0", OpticalChannel(name="green", description="green",
                                                                emission_lambda=500.0),
                                       description="plane", device=scope, excitation_lambda=920.0,
                                       imaging_rate=30.0, indicator="GCaMP6f", location="V1")
        movie = rng.integers(0, 4096, size=(frames, 256, 256), dtype=np.uint16)
        ts = TwoPhotonSeries(name="TwoPhotonSeries", imaging_plane=plane, rate=30.0, unit="n.a.",
                             data=H5DataIO(movie, compression="gzip", chunks=(10, 256, 256)))
        f.add_acquisition(ts)
        ophys = f.create_processing_module("ophys", "optical physiology")
        seg = ImageSegmentation()
        ophys.add(seg)
        ps = seg.create_plane_segmentation("cells", plane, "cells", ts)
        for i in range(20):
            mask = np.zeros((256, 256), dtype="f4")
            mask[i * 10:(i * 10) + 8, i * 10:(i * 10) + 8] = 1.0
            ps.add_roi(image_mask=mask)
        rois = ps.create_roi_table_region("all rois", region=list(range(20)))
        ophys.add(Fluorescence(roi_response_series=RoiResponseSeries(
            name="fluo", data=rng.standard_normal((frames, 20)), rois=rois, unit="lumens", rate=30.0)))
        with NWBHDF5IO(str(tmp), "w") as io:
            io.write(f)

    return _atomic_nwb(folder / f"session_{samples}x{channels}_{frames}f.nwb", build)


def nwb_many_objects(series: int = 300, series_samples: int = 20_000, units: int = 1000, trials: int = 500,
                     es_samples: int = 60_000, channels: int = 64, folder: Path = OUT) -> Path:
    """A session shaped like large DANDI files: many small objects rather than a few big ones.

    ``series`` float32 TimeSeries (rate-based, ``series_samples`` each) spread over 3
    processing modules, ``units`` units with ragged spike times (50-450 each), ``trials``
    trials with a boolean column, ``channels`` electrodes and one raw ElectricalSeries
    (``es_samples x channels`` int16, gzip chunks of (10000, channels), as in :func:`nwb`,
    so "first data" means the same on both files).  Defaults give about 33 MB.
    """
    from pynwb import NWBHDF5IO, NWBFile, TimeSeries

    def build(tmp: Path) -> None:
        rng = np.random.default_rng(3)
        f = NWBFile(session_description="refindex benchmark: many objects", identifier="bench-nwb-many",
                    session_start_time=datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
        _ecephys(f, rng, channels, es_samples)
        modules = [f.create_processing_module(m, f"{m} series") for m in ("behavior", "physiology", "analysis")]
        for i in range(series):
            data = rng.standard_normal(series_samples).astype("f4")
            modules[i % 3].add(TimeSeries(name=f"series{i:03d}", data=data, unit="a.u.", rate=1000.0,
                                          starting_time=float(i)))
        duration = es_samples / 30000.0
        for _ in range(units):
            f.add_unit(spike_times=np.sort(rng.uniform(0, duration, int(rng.integers(50, 451)))))
        f.add_trial_column("correct", "whether the trial was correct")
        for i in range(trials):
            f.add_trial(start_time=i * 0.004, stop_time=i * 0.004 + 0.003, correct=bool(rng.integers(0, 2)))
        with NWBHDF5IO(str(tmp), "w") as io:
            io.write(f)

    name = f"many_{series}s{series_samples}_{units}u_{trials}t_{es_samples}x{channels}.nwb"
    return _atomic_nwb(folder / name, build)

if __name__ == "__main__":
    for p in (many_chunks(), nwb(), nwb_many_objects()):
        print(p, f"{p.stat().st_size / 1e6:.1f} MB")
