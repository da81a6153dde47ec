"""Virtual datasets: chunks referenced in their source files where the mappings allow it."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

import refindex
from refindex.errors import UnsupportedError

from conftest import assert_same_values, consumer_open, notes, scan_open, zvalues

RNG = np.random.default_rng(7)


def _chunked_sources(folder, n=4, shape=(10, 100), chunks=(5, 50)) -> list[str]:
    names = []
    for i in range(n):
        name = f"src{i}.h5"
        with h5py.File(folder / name, "w") as f:
            f.create_dataset("data", data=RNG.integers(0, 1000, shape).astype("<i4"), chunks=chunks,
                             compression="gzip")
        names.append(name)
    return names


def _chunk_urls(refs, prefix: str) -> set[str]:
    templates = refs["templates"]
    out = set()
    for key, value in refs["refs"].items():
        if key.startswith(prefix + "/") and isinstance(value, list):
            url = value[0]
            out.add(templates[url.strip("{}")] if url.startswith("{{") else url)
    return out


def _vds(path, names, shape, place, *, dtype="<i4", fillvalue=-7, src_shape=(10, 100)) -> np.ndarray:
    layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
    for name, where in zip(names, place):
        layout[where] = h5py.VirtualSource(name, "data", shape=src_shape)
    with h5py.File(path, "w") as f:
        f.create_virtual_dataset("vds", layout, fillvalue=fillvalue)
    with h5py.File(path, "r") as f:
        return f["vds"][()]


def test_chunked_sources_by_reference(tmp_path):
    names = _chunked_sources(tmp_path)
    # Stacked along a new leading axis; the last slot (4) stays unmapped.
    expected = _vds(tmp_path / "v.h5", names, (5, 10, 100), [0, 1, 2, 3], fillvalue=-7)
    assert (expected[4] == -7).all()
    refs, root = scan_open(tmp_path / "v.h5", inline_threshold=0, inline_dataset_threshold=0)
    assert_same_values(expected, zvalues(root["vds"]))
    assert _chunk_urls(refs, "vds") == {str(tmp_path / n) for n in names}
    assert "refindex_inlined" not in notes(refs, "vds")
    assert root["vds"].chunks == (1, 5, 50)
    # unmapped: the fill value, written as fill chunks (zarr reads -7 there; xarray masks nothing)
    assert refs["refs"]["vds/4.0.0"].startswith("base64:") and json.loads(refs["refs"]["vds/.zarray"])["fill_value"] is None
    assert len([k for k, v in refs["refs"].items() if k.startswith("vds/") and isinstance(v, list)]) == 16


def test_chunked_sources_aligned_blocks_same_rank(tmp_path):
    names = _chunked_sources(tmp_path, n=2)
    # Two (10, 100) blocks side by side along axis 1, with an unmapped gap between them.
    expected = _vds(tmp_path / "v.h5", names, (10, 300), [(slice(0, 10), slice(0, 100)),
                                                          (slice(0, 10), slice(200, 300))])
    refs, root = scan_open(tmp_path / "v.h5", inline_threshold=0, inline_dataset_threshold=0)
    assert "refindex_inlined" not in notes(refs, "vds")
    assert_same_values(expected, zvalues(root["vds"]))
    assert (expected[:, 100:200] == -7).all()


def test_parquet_index_of_vds(tmp_path):
    names = _chunked_sources(tmp_path)
    expected = _vds(tmp_path / "v.h5", names, (4, 10, 100), [0, 1, 2, 3])
    out = tmp_path / "v.refs.parq"
    refindex.scan_to_parquet(str(tmp_path / "v.h5"), str(out), inline_threshold=0, inline_dataset_threshold=0, record_size=5)
    import fsspec
    import zarr

    fs = fsspec.filesystem("reference", fo=str(out), remote_protocol="file", asynchronous=True)
    root = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=2)
    assert_same_values(expected, zvalues(root["vds"]))


def test_contiguous_sources_tiled(tmp_path):
    names = []
    for i in range(4):
        names.append(f"c{i}.h5")
        with h5py.File(tmp_path / names[-1], "w") as f:
            f.create_dataset("data", data=RNG.standard_normal((10, 100)))
    place = [(slice(r, r + 10), slice(c, c + 100)) for r in (0, 10) for c in (0, 100)]
    expected = _vds(tmp_path / "v.h5", names, (20, 200), place, dtype="<f8", fillvalue=np.nan)
    refs, root = scan_open(tmp_path / "v.h5", inline_threshold=0, inline_dataset_threshold=0)
    assert "refindex_inlined" not in notes(refs, "vds")
    assert root["vds"].chunks == (10, 100)
    assert_same_values(expected, zvalues(root["vds"]))
    assert _chunk_urls(refs, "vds") == {str(tmp_path / n) for n in names}
    # Split into 3-row virtual chunks, a source's last chunk would spill into the block below.
    refs, root = scan_open(tmp_path / "v.h5", inline_threshold=0, inline_dataset_threshold=0, contiguous_chunk_bytes=2400)
    assert "edge chunks" in notes(refs, "vds")["refindex_inlined"]
    assert_same_values(expected, zvalues(root["vds"]))


def test_same_file_source(tmp_path):
    path = tmp_path / "v.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.arange(400, dtype="<i2").reshape(4, 100), chunks=(2, 100))
        layout = h5py.VirtualLayout(shape=(8, 100), dtype="<i2")
        layout[4:8] = h5py.VirtualSource(f["data"])
        f.create_virtual_dataset("vds", layout, fillvalue=3)
    refs, root = scan_open(path, inline_threshold=0, inline_dataset_threshold=0)
    with h5py.File(path, "r") as f:
        expected = f["vds"][()]
    assert "refindex_inlined" not in notes(refs, "vds")
    assert_same_values(expected, zvalues(root["vds"]))
    assert _chunk_urls(refs, "vds") == {str(path)}


@pytest.mark.parametrize("case", ["unaligned", "partial", "dtype", "unlimited"])
def test_falls_back_to_inline(tmp_path, case):
    names = _chunked_sources(tmp_path, n=2)
    path = tmp_path / "v.h5"
    if case == "unaligned":  # origin 3 is not a multiple of the chunk (5)
        expected = _vds(path, names, (23, 100), [slice(3, 13), slice(13, 23)])
    elif case == "partial":  # only part of each source
        layout = h5py.VirtualLayout(shape=(2, 5, 100), dtype="<i4")
        for i, n in enumerate(names):
            layout[i] = h5py.VirtualSource(n, "data", shape=(10, 100))[:5]
        with h5py.File(path, "w") as f:
            f.create_virtual_dataset("vds", layout, fillvalue=-7)
        with h5py.File(path, "r") as f:
            expected = f["vds"][()]
    elif case == "dtype":  # libhdf5 converts int32 sources to float64
        expected = _vds(path, names, (2, 10, 100), [0, 1], dtype="<f8")
    else:  # unlimited selections: the mapping's extent follows the source's
        with h5py.File(tmp_path / "grow.h5", "w") as f:
            f.create_dataset("data", data=np.arange(1000, dtype="<i4").reshape(10, 100), chunks=(5, 50),
                             maxshape=(None, 100))
        layout = h5py.VirtualLayout(shape=(10, 100), dtype="<i4", maxshape=(None, 100))
        src = h5py.VirtualSource("grow.h5", "data", shape=(10, 100), maxshape=(None, 100))
        layout[0:h5py.h5s.UNLIMITED, :] = src[0:h5py.h5s.UNLIMITED, :]
        with h5py.File(path, "w") as f:
            f.create_virtual_dataset("vds", layout, fillvalue=-7)
        with h5py.File(path, "r") as f:
            expected = f["vds"][()]
    refs, root = scan_open(path, inline_threshold=0, inline_dataset_threshold=0)
    why = {"unaligned": ["origin"], "partial": ["part of its source", "another shape"], "dtype": ["datatype"],
           "unlimited": ["not one regular block"]}[case]
    assert any(w in notes(refs, "vds")["refindex_inlined"] for w in why)
    assert_same_values(expected, zvalues(root["vds"]))


@pytest.mark.parametrize("src_fill", [-7, 5])
def test_unwritten_source_chunks(tmp_path, src_fill):
    """Unwritten source chunks read as the source's fill value: by reference only when it is the VDS's."""
    with h5py.File(tmp_path / "s.h5", "w") as f:
        d = f.create_dataset("data", shape=(10, 100), chunks=(5, 50), dtype="<i4", fillvalue=src_fill)
        d[:5, :50] = 1
    expected = _vds(tmp_path / "v.h5", ["s.h5"], (2, 10, 100), [1], fillvalue=-7)
    refs, root = scan_open(tmp_path / "v.h5", inline_threshold=0, inline_dataset_threshold=0)
    assert_same_values(expected, zvalues(root["vds"]))
    inlined = notes(refs, "vds").get("refindex_inlined", "")
    assert ("fill value" in inlined) == (src_fill != -7)


def test_unlimited_mapping_inlined():
    """The corpus VDS maps sources with unlimited selections: inlined, values exact."""
    path = "/work/shared/corpus/hdf5/1_vds.h5"
    refs, root = scan_open(path)
    with h5py.File(path, "r") as f:
        expected = f["vds_dset"][()]
    assert "unlimited" in notes(refs, "vds_dset")["refindex_inlined"] or "block" in notes(refs, "vds_dset")["refindex_inlined"]
    assert_same_values(expected, zvalues(root["vds_dset"]))


def test_source_outside_allowed_root_refused(tmp_path):
    outside = tmp_path / "outside"
    inside = tmp_path / "inside"
    outside.mkdir()
    inside.mkdir()
    names = _chunked_sources(outside, n=1)
    _vds(inside / "v.h5", [str(outside / names[0])], (1, 10, 100), [0])
    with pytest.raises(UnsupportedError, match="outside the allowed root"):
        refindex.scan(str(inside / "v.h5"))
    refs = refindex.scan(str(inside / "v.h5"), allow_outside=True, inline_threshold=0, inline_dataset_threshold=0)
    root = consumer_open(refs)
    with h5py.File(inside / "v.h5", "r") as f:
        assert_same_values(f["vds"][()], zvalues(root["vds"]))


def test_streamed_json_same_as_dict(tmp_path):
    """The streamed JSON writer gives every chunk its own source file, like the dict path."""
    names = _chunked_sources(tmp_path)
    expected = _vds(tmp_path / "v.h5", names, (4, 10, 100), [0, 1, 2, 3])
    src = str(tmp_path / "v.h5")
    refindex.scan_to_file(src, tmp_path / "dict.json", inline_threshold=300, inline_dataset_threshold=0)
    summary = refindex.scan_to_file(src, tmp_path / "stream.json", return_refs=False, inline_threshold=300, inline_dataset_threshold=0)
    assert (tmp_path / "dict.json").read_bytes() == (tmp_path / "stream.json").read_bytes()
    assert summary["chunks_referenced"] > 0
    import json

    refs = json.loads((tmp_path / "stream.json").read_text())
    assert _chunk_urls(refs, "vds") == {str(tmp_path / n) for n in names}
    assert_same_values(expected, zvalues(consumer_open(refs)["vds"]))


def test_missing_source_file_is_an_error(tmp_path):
    """libhdf5 reads fill values where a source file is missing: the scan says so instead of indexing them."""
    names = _chunked_sources(tmp_path, n=2)
    _vds(tmp_path / "v.h5", names, (23, 100), [slice(3, 13), slice(13, 23)])  # unaligned: values via libhdf5
    _vds(tmp_path / "a.h5", names, (2, 10, 100), [0, 1])  # aligned: by reference
    (tmp_path / names[1]).unlink()
    for name in ("v.h5", "a.h5"):
        with pytest.raises(UnsupportedError, match=f"source file {names[1]} is missing") as err:
            refindex.scan(tmp_path / name)
        assert err.value.path == "/vds"
        refs = refindex.scan(tmp_path / name, on_unsupported="skip")
        assert "vds/.zarray" not in refs["refs"] and refs["refindex"]["skipped"]
