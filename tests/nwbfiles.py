"""Builders of real NWB files (written with pynwb) for the hdmf-convention tests.

``build_all(folder)`` writes, into ``folder``:

* ``base.nwb``   - a small NWB file whose TimeSeries are linked from ``main.nwb``.
* ``main.nwb``   - one file with most of NWB: ecephys (electrodes table, regions,
  LFP, a big ElectricalSeries stored contiguous and a chunked+gzip one), units (ragged
  spike times, obs_intervals, electrode regions), trials with custom columns, epochs
  referencing TimeSeries, ophys (ImageSegmentation/PlaneSegmentation, ROI regions,
  RoiResponseSeries), behavior (Position/SpatialSeries), icephys (intracellular
  recordings table and its hierarchy), images (Images, ImageReferences, ImageSeries),
  a TimeSeries whose timestamps link to another's and a tiny extension namespace.
* ``linking.nwb`` - external links into ``base.nwb``: a whole TimeSeries, a dataset, and
  timestamps linked to the other file's TimeSeries.
* ``hardlink.nwb`` - a copy of a simple file where one dataset got a second name
  (an HDF5 hard link), added with h5py.

The extension is built with ``pynwb.spec`` in ``folder`` and registered with
``pynwb.load_namespaces``; its class comes from ``pynwb.get_class``.
"""

from __future__ import annotations

import os
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import h5py
import numpy as np

EXT_NS = "ndx-refindex-test"
START = datetime(2024, 3, 4, 5, 6, 7, tzinfo=timezone.utc)


def _nwbfile(identifier: str, **kw):
    from pynwb import NWBFile

    return NWBFile(
        session_description=f"refindex test file {identifier}",
        identifier=identifier,
        session_start_time=START,
        file_create_date=[START + timedelta(days=1)],
        **kw,
    )


# ---------------------------------------------------------------- extension


def build_extension(folder: Path):
    """Write and load a tiny extension namespace; returns the new class."""
    import pynwb
    from pynwb.spec import NWBAttributeSpec, NWBDatasetSpec, NWBGroupSpec, NWBNamespaceBuilder

    folder = Path(folder)
    ns_path = folder / f"{EXT_NS}.namespace.yaml"
    if not ns_path.exists():
        builder = NWBNamespaceBuilder(
            doc="refindex test extension", name=EXT_NS, version="0.1.0",
            author="refindex", contact="refindex@example.org",
        )
        builder.include_type("LabMetaData", namespace="core")
        spec = NWBGroupSpec(
            neurodata_type_def="RefindexLabMeta",
            neurodata_type_inc="LabMetaData",
            doc="lab metadata with a few typed fields",
            attributes=[NWBAttributeSpec(name="rig", doc="rig name", dtype="text")],
            datasets=[
                NWBDatasetSpec(name="gains", doc="per-channel gains", dtype="float64", shape=(None,)),
                NWBDatasetSpec(name="labels", doc="channel labels", dtype="text", shape=(None,)),
                NWBDatasetSpec(name="serial", doc="scalar serial number", dtype="int32"),
            ],
        )
        ext_source = f"{EXT_NS}.extensions.yaml"
        builder.add_spec(ext_source, spec)
        cwd = os.getcwd()
        try:  # NWBNamespaceBuilder.export writes the extension source next to the namespace
            os.chdir(folder)
            builder.export(ns_path.name)
        finally:
            os.chdir(cwd)
    if EXT_NS not in pynwb.get_type_map().namespace_catalog.namespaces:
        pynwb.load_namespaces(str(ns_path))
    return pynwb.get_class("RefindexLabMeta", EXT_NS)


# ---------------------------------------------------------------- base file


def build_base(path: Path) -> None:
    from pynwb import NWBHDF5IO, TimeSeries

    nwb = _nwbfile("base-file")
    nwb.add_acquisition(TimeSeries(name="shared_ts", data=np.arange(40, dtype="f8").reshape(20, 2),
                                   unit="mV", timestamps=np.linspace(0.0, 1.9, 20)))
    nwb.add_acquisition(TimeSeries(name="shared_data", data=np.arange(30, dtype="i4") * 3, unit="a.u.",
                                   rate=30.0, starting_time=0.0))
    with NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)


# ---------------------------------------------------------------- main file


def _ecephys(nwb, rng):
    from hdmf.backends.hdf5 import H5DataIO
    from pynwb.ecephys import LFP, ElectricalSeries

    dev = nwb.create_device("probe", description="silicon probe")
    groups = [nwb.create_electrode_group(f"shank{i}", description=f"shank {i}", location="CA1", device=dev)
              for i in range(2)]
    nwb.add_electrode_column("impedance_label", "free text per electrode")
    for i in range(8):
        nwb.add_electrode(x=float(i), y=2.0 * i, z=-1.0, location="CA1" if i < 4 else "CA3",
                          group=groups[i // 4], filtering="none", impedance_label=f"imp-{i}")
    region = nwb.create_electrode_table_region(list(range(8)), "all electrodes")
    big = rng.integers(-2000, 2000, size=(20000, 8), dtype=np.int16)
    nwb.add_acquisition(ElectricalSeries(name="raw", data=big, electrodes=region, rate=30000.0,
                                         starting_time=0.25, conversion=0.195e-6, offset=0.01,
                                         channel_conversion=np.linspace(1.0, 1.7, 8)))
    chunked = rng.standard_normal((4000, 4)).astype("f4")
    sub = nwb.create_electrode_table_region([1, 3, 5, 7], "odd electrodes")
    nwb.add_acquisition(ElectricalSeries(
        name="raw_gzip", data=H5DataIO(chunked, compression="gzip", chunks=(500, 4)),
        electrodes=sub, timestamps=np.arange(4000) / 1000.0))
    ecephys = nwb.create_processing_module("ecephys", "extracellular processing")
    lfp_region = nwb.create_electrode_table_region([0, 2, 4], "lfp electrodes")
    lfp = LFP(electrical_series=ElectricalSeries(name="lfp", data=rng.standard_normal((500, 3)),
                                                 electrodes=lfp_region, rate=1000.0))
    ecephys.add(lfp)
    return region


def _units_trials_epochs(nwb, rng):
    from pynwb import TimeSeries

    nwb.add_unit_column("quality", "sorting quality")
    nwb.add_unit(spike_times=[0.1, 0.2, 0.35], obs_intervals=[[0.0, 1.0]], electrodes=[0, 1], quality="good")
    nwb.add_unit(spike_times=[0.5], obs_intervals=[[0.0, 0.5], [0.7, 1.0]], electrodes=[2], quality="mua")
    nwb.add_unit(spike_times=[0.05, 1.5, 2.5, 3.0], obs_intervals=[[0.0, 4.0]], electrodes=[3, 4, 5],
                 quality="good")

    nwb.add_trial_column("correct", "whether the trial was correct")
    nwb.add_trial_column("stimulus", "stimulus name")
    nwb.add_trial_column("reward_ml", "reward volume")
    for i in range(5):
        nwb.add_trial(start_time=float(i), stop_time=i + 0.8, correct=bool(i % 2), stimulus=f"grating-{i * 45}",
                      reward_ml=0.01 * i)

    stim = TimeSeries(name="stimulus_trace", data=rng.standard_normal(100), unit="V", rate=100.0)
    nwb.add_stimulus(stim)
    # a TimeSeries whose timestamps are a link to another TimeSeries' timestamps
    clock = TimeSeries(name="clocked", data=np.arange(50, dtype="f4"), unit="m",
                       timestamps=np.linspace(0.0, 4.9, 50))
    follower = TimeSeries(name="follower", data=np.arange(50, dtype="i8") * 2, unit="m", timestamps=clock)
    nwb.add_acquisition(clock)
    nwb.add_acquisition(follower)
    nwb.add_epoch(0.0, 1.0, ["first", "a"], [stim])
    nwb.add_epoch(1.0, 3.0, ["second"], [stim, clock])
    nwb.add_epoch(3.0, 4.0, [], [clock])
    return clock


def _ophys(nwb, rng):
    from pynwb.ophys import (DfOverF, Fluorescence, ImageSegmentation, OpticalChannel, RoiResponseSeries,
                             TwoPhotonSeries)

    dev = nwb.create_device("microscope", description="2p scope")
    channel = OpticalChannel(name="green", description="green channel", emission_lambda=500.0)
    plane = nwb.create_imaging_plane("plane0", channel, description="a plane", device=dev, excitation_lambda=920.0,
                                     imaging_rate=30.0, indicator="GCaMP6f", location="V1",
                                     grid_spacing=[0.01, 0.01], grid_spacing_unit="meters")
    movie = TwoPhotonSeries(name="movie", data=rng.integers(0, 255, (10, 16, 16), dtype=np.uint8),
                            imaging_plane=plane, rate=30.0, unit="n.a.")
    nwb.add_acquisition(movie)
    ophys = nwb.create_processing_module("ophys", "optical physiology")
    seg = ImageSegmentation()
    ophys.add(seg)
    ps = seg.create_plane_segmentation("cells", plane, "cells", movie)
    for i in range(4):
        mask = np.zeros((16, 16), dtype="f4")
        mask[i * 4:(i + 1) * 4, i * 3:(i * 3) + 5] = 1.0
        ps.add_roi(image_mask=mask)
    ps2 = seg.create_plane_segmentation("pixels", plane, "pixel masks", movie)
    ps2.add_roi(pixel_mask=[(1, 2, 1.0), (3, 4, 0.5)])
    ps2.add_roi(pixel_mask=[(5, 6, 0.25)])
    rois = ps.create_roi_table_region("all rois", region=[0, 1, 2, 3])
    fl = Fluorescence(roi_response_series=RoiResponseSeries(name="fluo", data=rng.standard_normal((30, 4)),
                                                            rois=rois, unit="lumens", rate=30.0))
    ophys.add(fl)
    some = ps.create_roi_table_region("two rois", region=[1, 3])
    ophys.add(DfOverF(roi_response_series=RoiResponseSeries(name="dff", data=rng.standard_normal((30, 2)),
                                                            rois=some, unit="n.a.", rate=30.0)))


def _behavior(nwb, rng):
    from pynwb.behavior import Position, SpatialSeries

    beh = nwb.create_processing_module("behavior", "behavior")
    pos = Position(spatial_series=SpatialSeries(name="xy", data=rng.standard_normal((200, 2)),
                                                reference_frame="arena corner", rate=50.0))
    beh.add(pos)


def _icephys(nwb, rng):
    from pynwb.icephys import CurrentClampSeries, CurrentClampStimulusSeries, VoltageClampSeries

    dev = nwb.create_device("amp", description="amplifier")
    elec = nwb.create_icephys_electrode(name="elec0", description="patch", device=dev)
    stim = CurrentClampStimulusSeries(name="ccss", data=np.ones(100) * 1e-10, starting_time=0.0, rate=10000.0,
                                      electrode=elec, gain=0.02, sweep_number=np.uint64(0))
    resp = CurrentClampSeries(name="ccs", data=rng.standard_normal(100), bias_current=1e-12, bridge_balance=7e7,
                              capacitance_compensation=1e-12, starting_time=0.0, rate=10000.0, electrode=elec,
                              gain=0.02, sweep_number=np.uint64(0))
    r0 = nwb.add_intracellular_recording(electrode=elec, stimulus=stim, response=resp, id=10)
    vresp = VoltageClampSeries(name="vcs", data=rng.standard_normal(80), gain=0.02, starting_time=1.0, rate=8000.0,
                               electrode=elec, sweep_number=np.uint64(1))
    r1 = nwb.add_intracellular_recording(electrode=elec, response=vresp, id=11)
    sim = nwb.add_icephys_simultaneous_recording(recordings=[r0, r1])
    seq = nwb.add_icephys_sequential_recording(simultaneous_recordings=[sim], stimulus_type="square")
    rep = nwb.add_icephys_repetition(sequential_recordings=[seq])
    nwb.add_icephys_experimental_condition(repetitions=[rep])


def _images(nwb, rng):
    from pynwb.base import ImageReferences, Images
    from pynwb.image import GrayscaleImage, ImageSeries, IndexSeries, RGBImage

    gray = GrayscaleImage(name="gray", data=rng.integers(0, 255, (8, 6), dtype=np.uint8), resolution=10.0,
                          description="a gray image")
    rgb = RGBImage(name="rgb", data=rng.integers(0, 255, (4, 5, 3), dtype=np.uint8))
    imgs = Images(name="templates", images=[gray, rgb], description="stimulus templates",
                  order_of_images=ImageReferences(name="order_of_images", data=[rgb, gray]))
    nwb.add_stimulus_template(imgs)
    nwb.add_acquisition(ImageSeries(name="camera", data=rng.integers(0, 255, (5, 6, 7), dtype=np.uint8),
                                    unit="n.a.", rate=5.0, description="behaviour camera"))
    nwb.add_stimulus(IndexSeries(name="shown", data=np.array([0, 1, 1, 0], dtype=np.uint32), indexed_images=imgs,
                                 unit="N/A", timestamps=[0.0, 0.5, 1.0, 1.5]))


def _extension(nwb, folder):
    cls = build_extension(folder)
    nwb.add_lab_meta_data(cls(name="rig_meta", rig="rig-7", gains=np.array([1.0, 2.5, 4.0]),
                              labels=["left", "right", "béta"], serial=np.int32(12345)))


def build_main(path: Path, folder: Path) -> None:
    from pynwb import NWBHDF5IO
    from pynwb.file import Subject

    rng = np.random.default_rng(1234)
    nwb = _nwbfile("main-file", experimenter=["Doe, Jane", "Roe, Rick"], keywords=["refindex", "test"],
                   lab="the lab", institution="somewhere", experiment_description="all of NWB",
                   session_id="s-001", related_publications=["doi:10.0/xyz"])
    nwb.subject = Subject(subject_id="mouse-1", species="Mus musculus", sex="F", age="P90D",
                          date_of_birth=START - timedelta(days=90), description="a mouse")
    _ecephys(nwb, rng)
    _units_trials_epochs(nwb, rng)
    _ophys(nwb, rng)
    _behavior(nwb, rng)
    _icephys(nwb, rng)
    _images(nwb, rng)
    _extension(nwb, folder)
    with NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)


# ---------------------------------------------------------------- external links


def build_linking(path: Path, base_path: Path) -> None:
    """External links into ``base_path``: a whole TimeSeries, a data dataset and a timestamps link.

    ``path`` and ``base_path`` should be relative names in the current folder: pynwb writes
    the other file's name into the link as given.
    """
    from pynwb import NWBHDF5IO, TimeSeries, get_manager

    manager = get_manager()
    with NWBHDF5IO(str(base_path), "r", manager=manager) as base_io:
        base = base_io.read()
        nwb = _nwbfile("linking-file")
        shared = base.acquisition["shared_ts"]
        nwb.add_acquisition(shared)  # an external link to the group
        ds = base.acquisition["shared_data"].data  # an h5py.Dataset: an external link to the dataset
        nwb.add_acquisition(TimeSeries(name="linked_data", data=ds, unit="a.u.", rate=30.0))
        nwb.add_acquisition(TimeSeries(name="own_data", data=np.arange(20, dtype="f4"), unit="m",
                                       timestamps=shared))  # timestamps: external link to a dataset
        with NWBHDF5IO(str(path), "w", manager=manager) as io:
            io.write(nwb, link_data=True)


# ---------------------------------------------------------------- hard link file


def build_hardlink(path: Path) -> None:
    """A file where ``/acquisition/b/timestamps`` and ``/acquisition/a/timestamps`` are one dataset."""
    from pynwb import NWBHDF5IO, TimeSeries

    nwb = _nwbfile("hardlink-file")
    t = np.linspace(0.0, 1.0, 11)
    nwb.add_acquisition(TimeSeries(name="a", data=np.arange(11.0), unit="m", timestamps=t))
    nwb.add_acquisition(TimeSeries(name="b", data=np.arange(11) * 2, unit="m", timestamps=t))
    with NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)
    with h5py.File(path, "r+") as f:
        del f["/acquisition/b/timestamps"]
        f["/acquisition/b/timestamps"] = f["/acquisition/a/timestamps"]  # hard link


def build_many_objects(path: Path, series: int = 30, units: int = 60, trials: int = 40) -> None:
    """The shape of large DANDI sessions, small: many TimeSeries with scalar ``starting_time``
    in processing modules, units with ragged spike times, trials, an electrodes table."""
    from pynwb import NWBHDF5IO, TimeSeries

    rng = np.random.default_rng(11)
    nwb = _nwbfile("many-objects")
    dev = nwb.create_device("probe", description="probe")
    group = nwb.create_electrode_group("shank0", description="shank", location="CA1", device=dev)
    for i in range(8):
        nwb.add_electrode(x=float(i), y=0.0, z=0.0, location="CA1", group=group, filtering="none")
    for m in range(3):
        module = nwb.create_processing_module(f"module{m}", f"module {m}")
        for i in range(series // 3):
            module.add(TimeSeries(name=f"series{i:03d}", data=rng.standard_normal(3000).astype("f4"),
                                  unit="a.u.", rate=100.0, starting_time=float(i)))
    for _ in range(units):
        nwb.add_unit(spike_times=np.sort(rng.uniform(0, 100, int(rng.integers(20, 200)))))
    nwb.add_trial_column("correct", "whether correct")
    for i in range(trials):
        nwb.add_trial(start_time=2.0 * i, stop_time=2.0 * i + 1.5, correct=bool(i % 2))
    with NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)


def build_all(folder: Path) -> dict[str, Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = {"base": "base.nwb", "main": "main.nwb", "linking": "linking.nwb", "hardlink": "hardlink.nwb"}
    paths = {k: folder / v for k, v in names.items()}
    build_base(paths["base"])
    build_main(paths["main"], folder)
    cwd = os.getcwd()
    try:  # pynwb writes the external link's file name as given: keep it relative
        os.chdir(folder)
        build_linking(Path(names["linking"]), Path(names["base"]))
    finally:
        os.chdir(cwd)
    build_hardlink(paths["hardlink"])
    return paths


if __name__ == "__main__":  # pragma: no cover - manual use: python tests/nwbfiles.py OUTDIR
    import sys

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/refindex_nwb")
    shutil.rmtree(out, ignore_errors=True)
    print(build_all(out))
