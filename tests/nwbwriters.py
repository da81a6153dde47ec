"""Small NWB files written the way other NWB writers write them (AqNWB, MIES, MatNWB, NeuroConv).

Each builder writes a small file with pynwb and then rewrites, with h5py, what the other
writer stores differently (learned from the writers' sources: AqNWB ``src/io/hdf5/HDF5IO.cpp``
and ``src/nwb/NWBFile.cpp``, MIES' IPNWB ``IPNWB_Writer.ipf``/``IPNWB_HDF5Helpers.ipf``,
MatNWB ``+io/mapData2H5.m``/``+io/getBaseType.m``), keeping every value.  pynwb's
``NWBHDF5IO`` reads each of them: that is what real archives hold and what the readers
over an index must match.

* every file but NeuroConv's: ``conversion``, ``resolution``, ``offset`` and ``rate`` as float32
  attributes (the spec's type; pynwb writes float64).
* ``aqnwb.nwb``: HDF5 "latest" format (AqNWB writes for SWMR); ``identifier``,
  ``session_description``, ``session_start_time``, ``timestamps_reference_time`` and every
  cached specification are fixed-length ASCII strings exactly as long as the text
  (null-terminated type, no terminator stored); extensible chunked ``data``/``timestamps``.
* ``mies.nwb``: intracellular series; every text dataset MIES writes is a one-element
  array (``Make/T/N=1``): the four file fields, the cached specifications, the electrode's
  ``description``; ``starting_time`` a shape ``(1,)`` float64 (``rate`` float32, unit
  "Seconds"); Igor's wave attributes on ``data`` (``IGORWaveType`` int32, ``IGORWaveScaling``
  a float64 array); ``sweep_number`` uint32; an untyped lab-notebook group.
* ``matnwb.nwb``: booleans as HDF5 enums of int8 ``FALSE``/``TRUE`` (MatNWB's ``logical``, the
  same type h5py gives numpy's bool); an empty dataset of shape ``(0,)`` and maximum shape ``(0,)`` (``H5S.create_simple(1, 0, 0)``);
  ``file_create_date`` chunked and unlimited.
* ``neuroconv.nwb``: pynwb through NeuroConv's habits: data written from a chunk iterator,
  gzip-compressed chunks, and an extension type whose attribute is unsigned (``id`` uint64,
  as ndx-pose's ``SkeletonInstance.id``).

* ``neuroconv_ttl.nwb``: a real file NeuroConv wrote (NWB 2.5.0), from its repository
  (tests/data/README.md).

``build_all(folder)`` returns ``{name: path}`` (names ``aqnwb``, ``mies``, ``matnwb``,
``neuroconv``, ``neuroconv_ttl``); the session fixture ``nwb_files`` (tests/conftest.py)
includes them.
Old pynwb versions are covered by the real files of the corpus (``pynwb/*.nwb``).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import h5py
import numpy as np

START = datetime(2025, 6, 7, 8, 9, 10, tzinfo=timezone.utc)
UNSIGNED_NS = "ndx-refindex-unsigned"
FILE_TEXT = ("identifier", "session_description", "session_start_time", "timestamps_reference_time")


def _nwbfile(identifier: str, **kw):
    from pynwb import NWBFile

    return NWBFile(session_description=f"written like {identifier} writes it", identifier=identifier,
                   session_start_time=START, file_create_date=[START + timedelta(hours=1)], **kw)


def _write(nwb, path: Path, **file_kw) -> None:
    from pynwb import NWBHDF5IO

    if file_kw:
        with h5py.File(path, "w", **file_kw) as f, NWBHDF5IO(file=f, mode="w") as io:
            io.write(nwb)
    else:
        with NWBHDF5IO(str(path), "w") as io:
            io.write(nwb)


# ---------------------------------------------------------------- rewriting one dataset, value kept


def _attrs_of(d: h5py.Dataset) -> list[tuple[str, object, np.dtype]]:
    return [(k, d.attrs[k], d.attrs.get_id(k).dtype) for k in d.attrs]


def _text(d: h5py.Dataset) -> str:
    v = d[()]
    v = v[0] if isinstance(v, np.ndarray) else v
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def fixed_text(f: h5py.File, path: str) -> None:
    """Scalar text dataset ``path`` as AqNWB writes one: ``H5T_C_S1`` of the text's length, ASCII."""
    data = _text(f[path]).encode("utf-8")
    attrs = _attrs_of(f[path])
    del f[path]
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(max(1, len(data)))
    tid.set_strpad(h5py.h5t.STR_NULLTERM)
    dsid = h5py.h5d.create(f.id, path.encode(), tid, h5py.h5s.create(h5py.h5s.SCALAR))
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array(data, dtype=f"S{max(1, len(data))}"), mtype=tid)
    for k, v, dt in attrs:
        f[path].attrs.create(k, v, dtype=dt)


def one_element(f: h5py.File, path: str, **kw) -> None:
    """Scalar dataset ``path`` as a one-element array (MIES' ``Make/N=1`` waves), attributes kept."""
    d = f[path]
    value, attrs = d[()], _attrs_of(d)
    dtype = h5py.string_dtype("utf-8") if h5py.check_string_dtype(d.dtype) else d.dtype
    if h5py.check_string_dtype(d.dtype):
        value = _text(d)
    del f[path]
    new = f.create_dataset(path, data=np.array([value], dtype=dtype if dtype.kind != "O" else object),
                           dtype=dtype, **kw)
    for k, v, dt in attrs:
        new.attrs.create(k, v, dtype=dt)


def float32_attributes(f: h5py.File, names=("conversion", "resolution", "offset", "rate")) -> None:
    """Every ``names`` attribute as float32, as AqNWB, MIES and MatNWB write them (pynwb writes float64)."""
    found: list[h5py.HLObject] = []
    f.visititems(lambda _, obj: found.append(obj) if any(n in obj.attrs for n in names) else None)
    for obj in found:
        for name in names:
            if name in obj.attrs:
                obj.attrs.create(name, obj.attrs[name], dtype="<f4")


def spec_paths(f: h5py.File) -> list[str]:
    out: list[str] = []
    f["specifications"].visititems(lambda name, obj: out.append(f"/specifications/{name}")
                                   if isinstance(obj, h5py.Dataset) else None)
    return sorted(out)


# ---------------------------------------------------------------- AqNWB


def build_aqnwb(path: Path) -> None:
    from hdmf.backends.hdf5 import H5DataIO
    from pynwb.ecephys import ElectricalSeries

    rng = np.random.default_rng(22)
    nwb = _nwbfile("aqnwb-file")
    dev = nwb.create_device("Acquisition device", description="a headstage", manufacturer="open ephys")
    group = nwb.create_electrode_group("array0", description="array", location="unknown", device=dev)
    for i in range(4):
        nwb.add_electrode(location="unknown", group=group, id=i)
    region = nwb.create_electrode_table_region(list(range(4)), "recorded electrodes")
    data = rng.standard_normal((300, 4)).astype("f4")
    nwb.add_acquisition(ElectricalSeries(
        name="array0", data=H5DataIO(data, chunks=(100, 4), maxshape=(None, 4)), electrodes=region,
        timestamps=H5DataIO(np.arange(300) / 30000.0, chunks=(100,), maxshape=(None,)),
        channel_conversion=np.ones(4, dtype="f4"), conversion=1.0e-6))
    _write(nwb, path, libver="latest")
    with h5py.File(path, "r+") as f:
        for name in FILE_TEXT:
            fixed_text(f, "/" + name)
        for spec in spec_paths(f):
            fixed_text(f, spec)
        float32_attributes(f)
        axis = f["/acquisition/array0/channel_conversion"].attrs
        axis.create("axis", axis["axis"], dtype="<i4")  # AqNWB's I32


# ---------------------------------------------------------------- MIES


def build_mies(path: Path) -> None:
    from pynwb.icephys import CurrentClampSeries, VoltageClampSeries

    rng = np.random.default_rng(23)
    nwb = _nwbfile("mies-file")
    dev = nwb.create_device("ITC18USB_Dev_0", description="ITC18USB")
    elec = nwb.create_icephys_electrode(name="electrode_0", description="headstage 0", device=dev)
    for sweep in range(2):
        nwb.add_acquisition(CurrentClampSeries(
            name=f"data_{sweep:05d}_AD0", data=rng.standard_normal(200).astype("f4"), electrode=elec,
            gain=1.0, starting_time=float(sweep), rate=50000.0, sweep_number=np.uint32(sweep),
            bias_current=0.0, bridge_balance=0.0, capacitance_compensation=0.0, comments="sweep " + str(sweep)))
    nwb.add_stimulus(VoltageClampSeries(
        name="data_00000_DA0", data=rng.standard_normal(200).astype("f4"), electrode=elec, gain=1.0,
        starting_time=0.0, rate=50000.0, sweep_number=np.uint32(0)))
    _write(nwb, path)
    with h5py.File(path, "r+") as f:
        for name in FILE_TEXT:
            one_element(f, "/" + name)
        for spec in spec_paths(f):
            one_element(f, spec)
        one_element(f, "/general/intracellular_ephys/electrode_0/description")
        for group in ("/acquisition", "/stimulus/presentation"):
            for name, series in f[group].items():
                one_element(f, f"{group}/{name}/starting_time")
                series["starting_time"].attrs["unit"] = "Seconds"
                series["data"].attrs.create("IGORWaveType", 2, dtype="<i4")
                series["data"].attrs.create("IGORWaveScaling", np.array([[0.0, 0.0], [0.02, 0.0]]))
        float32_attributes(f)
        notebook = f.create_group("/general/labnotebook/ITC18USB_Dev_0")
        notebook.create_dataset("numericalValues", data=rng.standard_normal((3, 4, 9)))
        notebook.create_dataset("textualKeys", data=np.array([["Sweep #", "TimeStamp"], ["", "s"]], dtype=object),
                                dtype=h5py.string_dtype("utf-8"))


# ---------------------------------------------------------------- MatNWB


def build_matnwb(path: Path) -> None:
    from pynwb import TimeSeries

    nwb = _nwbfile("matnwb-file")
    nwb.add_trial_column("correct", "whether the animal was right")
    for i in range(4):
        nwb.add_trial(start_time=float(i), stop_time=i + 0.5, correct=bool(i % 2))
    nwb.add_acquisition(TimeSeries(name="position", data=np.linspace(0.0, 1.0, 20).reshape(10, 2), unit="m",
                                   timestamps=np.arange(10) / 10.0))
    _write(nwb, path)
    with h5py.File(path, "r+") as f:
        logical = h5py.enum_dtype({"FALSE": 0, "TRUE": 1}, basetype="i1")
        values = f["/intervals/trials/correct"][()].astype("i1")
        attrs = _attrs_of(f["/intervals/trials/correct"])
        del f["/intervals/trials/correct"]
        new = f.create_dataset("/intervals/trials/correct", data=values, dtype=logical)
        for k, v, dt in attrs:
            new.attrs.create(k, v, dtype=dt)
        # an empty dataset as MatNWB writes one: dims 0, maximum dims 0, nothing stored
        dsid = h5py.h5d.create(f.id, b"/general/keywords", h5py.h5t.py_create(h5py.string_dtype("utf-8"), logical=True),
                               h5py.h5s.create_simple((0,), (0,)))
        dsid.close()
        created = f["/file_create_date"][()]
        del f["/file_create_date"]
        f.create_dataset("/file_create_date", data=created, dtype=h5py.string_dtype("utf-8"), chunks=(1,),
                         maxshape=(None,))
        float32_attributes(f)  # MatNWB casts to the spec's dtype


# ---------------------------------------------------------------- NeuroConv (pynwb, an extension)


def build_unsigned_extension(folder: Path):
    """A tiny extension with an unsigned attribute (as ndx-pose's ``SkeletonInstance.id``): returns
    (its class, a BuildManager that knows it).  Loaded into a copy of pynwb's type map, so files
    written or exported by other tests in this process do not cache it."""
    import pynwb
    from hdmf.build import BuildManager
    from pynwb.spec import NWBAttributeSpec, NWBDatasetSpec, NWBGroupSpec, NWBNamespaceBuilder

    folder = Path(folder)
    ns_path = folder / f"{UNSIGNED_NS}.namespace.yaml"
    if not ns_path.exists():
        builder = NWBNamespaceBuilder(doc="an unsigned attribute", name=UNSIGNED_NS, version="0.1.0",
                                      author="refindex", contact="refindex@example.org")
        builder.include_type("NWBDataInterface", namespace="core")
        spec = NWBGroupSpec(
            neurodata_type_def="SkeletonInstanceLike", neurodata_type_inc="NWBDataInterface",
            doc="one instance of a skeleton",
            attributes=[NWBAttributeSpec(name="id", doc="identifier of this instance", dtype="uint64")],
            datasets=[NWBDatasetSpec(name="node_locations", doc="x, y of each node", dtype="float64",
                                     shape=(None, 2))],
        )
        builder.add_spec(f"{UNSIGNED_NS}.extensions.yaml", spec)
        cwd = os.getcwd()
        try:
            os.chdir(folder)
            builder.export(ns_path.name)
        finally:
            os.chdir(cwd)
    type_map = pynwb.get_type_map()  # a copy of the global one
    type_map.load_namespaces(str(ns_path))
    return type_map.get_dt_container_cls("SkeletonInstanceLike", UNSIGNED_NS), BuildManager(type_map)


def build_neuroconv(path: Path) -> None:
    from hdmf.backends.hdf5 import H5DataIO
    from hdmf.data_utils import DataChunkIterator
    from pynwb.ecephys import ElectricalSeries

    rng = np.random.default_rng(24)
    cls, manager = build_unsigned_extension(path.parent)
    nwb = _nwbfile("neuroconv-file", session_id="ses-1", experimenter=["Doe, Jane"])
    dev = nwb.create_device("Neuropixels", description="probe")
    group = nwb.create_electrode_group("imec0", description="shank", location="CA1", device=dev)
    for i in range(6):
        nwb.add_electrode(location="CA1", group=group, rel_x=float(i), rel_y=0.0, group_name="imec0")
    region = nwb.create_electrode_table_region(list(range(6)), "all")
    blocks = [rng.integers(-100, 100, (6,), dtype=np.int16) for _ in range(500)]
    series = ElectricalSeries(
        name="ElectricalSeriesAP", electrodes=region, rate=30000.0, starting_time=0.0, conversion=2.3e-6,
        data=H5DataIO(DataChunkIterator(iter(blocks), buffer_size=100), compression="gzip", chunks=(100, 6)))
    nwb.add_acquisition(series)
    behavior = nwb.create_processing_module("behavior", "pose estimation")
    behavior.add(cls(name="skeleton_instance", id=np.uint64(7), node_locations=rng.standard_normal((3, 2))))
    from pynwb import NWBHDF5IO

    with NWBHDF5IO(str(path), "w", manager=manager) as io:
        io.write(nwb)


def unpack_neuroconv_ttl(path: Path) -> None:
    """A real NeuroConv file (tests/data/README.md says where it comes from)."""
    import gzip
    import shutil

    with gzip.open(Path(__file__).parent / "data" / "neuroconv_mock_ttl_examples.nwb.gz") as src, \
            open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)


# ---------------------------------------------------------------- all of them

BUILDERS: dict[str, Callable[[Path], None]] = {
    "aqnwb": build_aqnwb, "mies": build_mies, "matnwb": build_matnwb, "neuroconv": build_neuroconv,
    "neuroconv_ttl": unpack_neuroconv_ttl,
}


def build_all(folder: Path) -> dict[str, Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, build in BUILDERS.items():
        out[name] = folder / f"{name}.nwb"
        build(out[name])
    return out
