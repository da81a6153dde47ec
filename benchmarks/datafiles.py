"""The benchmark inputs, built once into benchmarks/out/ and reused while present.

``many_chunks``: one 2-D float32 dataset cut into tiny gzip chunks (P1: index size and
scan speed are dominated by the number of chunks).  ``nwb``: a pynwb-written session
of about 120 MB (P2/P3: the metadata layout pynwb/h5py produce, spread over a file
whose bulk is data).
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


def many_chunks(rows: int = 2000, cols: int = 1000, chunk: int = 2, folder: Path = OUT) -> Path:
    """``rows x cols`` float32, ``chunk x chunk`` gzip chunks (defaults: 500,000 chunks)."""
    import h5py

    def build(tmp: Path) -> None:
        rng = np.random.default_rng(1)
        data = np.round(rng.standard_normal((rows, cols)), 2).astype("f4")
        with h5py.File(tmp, "w") as f:
            f.create_dataset("data", data=data, chunks=(chunk, chunk), compression="gzip")

    return _atomic(folder / f"many_chunks_{rows}x{cols}_c{chunk}.h5", build)


def huge_chunks(rows: int = 10_000, cols: int = 1_000, folder: Path = OUT) -> Path:
    """``rows x cols`` uint8 in 1x1 chunks (defaults: 10^7 chunks), built in seconds."""
    from refindex.demo import write_one_byte_chunks

    return _atomic(folder / f"huge_chunks_{rows}x{cols}.h5", lambda tmp: write_one_byte_chunks(tmp, rows, cols))


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
        dev = f.create_device("probe", description="silicon probe")
        groups = [f.create_electrode_group(f"shank{i}", description=f"shank {i}", location="CA1", device=dev)
                  for i in range(4)]
        for i in range(channels):
            f.add_electrode(x=float(i), y=2.0 * i, z=0.0, location="CA1", group=groups[i * 4 // channels],
                            filtering="none")
        region = f.create_electrode_table_region(list(range(channels)), "all electrodes")
        raw = rng.integers(-2000, 2000, size=(samples, channels), dtype=np.int16)
        f.add_acquisition(ElectricalSeries(
            name="ElectricalSeries", electrodes=region, rate=30000.0,
            data=H5DataIO(raw, compression="gzip", chunks=(min(10000, samples), channels))))
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

    name = f"session_{samples}x{channels}_{frames}f.nwb"
    path = folder / name
    if not path.exists():  # pynwb wants a .nwb name: build under a temporary .nwb name
        tmp = folder / ("tmp_" + name)
        folder.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            tmp.unlink()
        build(tmp)
        os.replace(tmp, path)
    return path


if __name__ == "__main__":
    for p in (many_chunks(), nwb()):
        print(p, f"{p.stat().st_size / 1e6:.1f} MB")
