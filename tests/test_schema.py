"""Consolidated metadata, Zarr Object Models (ZEP 6) and template checks (refindex.schema)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import fsspec
import h5py
import numpy as np
import pytest
import s3fs
import zarr

import refindex
from refindex import read as schema
from refindex.cli import main as cli_main
from refindex.read import METADATA_NAMES, IndexStore, consolidation_differences

from conftest import assert_same_values, json_roundtrip, moto_s3

from corpus import CORPUS  # noqa: E402
MANIFEST = CORPUS / "MANIFEST.tsv"


def _corpus_rows() -> list[dict[str, str]]:
    if not MANIFEST.exists():
        return []
    with open(MANIFEST, newline="") as fh:
        return [r for r in csv.DictReader(fh, delimiter="\t") if not r["notes"].startswith("NOT HDF5")]


def _write_sample(path: Path, variant: str = "base") -> None:
    """A small file with nested groups, several dtypes, filters, links, dimension scales and attributes."""
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "sample"
        f.attrs["version"] = 3
        g = f.create_group("acq")
        g.attrs["nan"] = np.nan
        raw = g.create_dataset("raw", data=np.arange(600, dtype="<i2").reshape(20, 30), chunks=(10, 15),
                               compression="gzip", shuffle=True, fillvalue=-1)
        raw.attrs["units"] = "mV"
        t = g.create_dataset("t", data=np.linspace(0, 1, 20), chunks=(5,))
        t.make_scale("time")
        raw.dims[0].attach_scale(t)
        sub = g.create_group("deep/er")
        sub.create_dataset("names", data=np.array(["a", "bc"], dtype=h5py.string_dtype()))
        f.create_dataset("scalar", data=1.5)
        f.create_dataset("bytes", data=np.array([b"xy", b"z"], dtype="S2"))
        f["alias"] = f["acq/raw"]  # hard link: the same array under two names
        f["soft"] = h5py.SoftLink("/acq/t")
        if variant == "changed":
            del f["acq/deep/er/names"]  # missing array
            del f["acq/raw"].attrs["units"]  # missing attribute
            del f["scalar"]
            f.create_dataset("scalar", data=np.int32(1))  # changed dtype
            del f["bytes"]
            f.create_dataset("bytes", data=np.array([[b"xy"], [b"z"]], dtype="S2"))  # changed rank


def _walk_metadata(group: zarr.Group) -> dict[str, Any]:
    """Every node's kind, array metadata and attributes, for comparing two openings."""
    out: dict[str, Any] = {"": ("group", json.dumps(dict(group.attrs), sort_keys=True, default=str))}
    for name, node in group.members(max_depth=None):
        attrs = json.dumps(dict(node.attrs), sort_keys=True, default=str)
        if isinstance(node, zarr.Array):
            out[name] = ("array", node.shape, str(node.dtype), node.chunks, str(node.fill_value), attrs)
        else:
            out[name] = ("group", attrs)
    return out


def _assert_consolidated_exact(refs: dict[str, Any]) -> None:
    assert consolidation_differences(refs) == []
    zmeta = json.loads(refs["refs"][".zmetadata"])
    assert zmeta["zarr_consolidated_format"] == 1
    per_node = {k for k in refs["refs"] if k.rsplit("/", 1)[-1] in METADATA_NAMES}
    assert set(zmeta["metadata"]) == per_node
    # The three ways to open agree: refindex.open (.zmetadata alone), zarr.open_consolidated,
    # and zarr reading every node's own documents.
    st = refindex.read.store(refs)
    by_node = _walk_metadata(zarr.open_group(st, mode="r", zarr_format=2, use_consolidated=False))
    assert _walk_metadata(refindex.open(refs, check_source=False)) == by_node
    assert _walk_metadata(zarr.open_consolidated(st, mode="r", zarr_format=2)) == by_node


def test_consolidated_metadata_generated_file(tmp_path):
    path = tmp_path / "sample.h5"
    _write_sample(path)
    refs = json_roundtrip(refindex.scan(str(path)))
    _assert_consolidated_exact(refs)
    zmeta = json.loads(refs["refs"][".zmetadata"])["metadata"]
    assert "alias/.zarray" in zmeta and "acq/raw/.zarray" in zmeta  # hard-link names both present
    assert zmeta["acq/raw/.zattrs"]["_ARRAY_DIMENSIONS"]  # conventions are in it too


def test_parquet_index_opens_through_its_zmetadata(tmp_path):
    """fsspec's parquet layout keeps all metadata in its own .zmetadata; open and ZOM use it."""
    from kerchunk.df import refs_to_dataframe

    path = tmp_path / "sample.h5"
    _write_sample(path)
    refs = json_roundtrip(refindex.scan(str(path)))
    parq = tmp_path / "sample.parq"
    refs_to_dataframe(refs, str(parq))
    assert _walk_metadata(refindex.open(str(parq))) == _walk_metadata(refindex.open(refs))
    assert schema.zom_json(refindex.object_model(str(parq))) == schema.zom_json(refindex.object_model(refs))


@pytest.mark.skipif(not MANIFEST.exists(), reason=f"HDF5 corpus not found at {CORPUS}")
@pytest.mark.parametrize("row", _corpus_rows(), ids=lambda r: r["relpath"])
def test_consolidated_metadata_corpus(row):
    refs = json_roundtrip(refindex.scan(str(CORPUS / row["relpath"]), on_unsupported="skip"))
    _assert_consolidated_exact(refs)


# ---------------------------------------------------------------- remote index on a loopback S3


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server on 127.0.0.1 and the options s3fs needs to reach it."""
    with moto_s3() as opts:
        fs = fsspec.filesystem("s3", skip_instance_cache=True, **opts)
        fs.mkdir("schema-bucket")
        yield opts


def test_remote_index_reads_only_zmetadata(tmp_path, s3, monkeypatch):
    path = tmp_path / "sample.h5"
    _write_sample(path)
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3)
    fs.put(str(path), "schema-bucket/x.h5")
    refs = refindex.scan("s3://schema-bucket/x.h5", storage_options=s3)
    fs.pipe("schema-bucket/x.refs.json", json.dumps(refs, allow_nan=True).encode())

    keys: list[str] = []
    orig = IndexStore.get

    async def counting_get(self, key, *args, **kw):
        keys.append(key)
        return await orig(self, key, *args, **kw)

    monkeypatch.setattr(IndexStore, "get", counting_get)
    s3_calls: list[tuple[str, str]] = []
    orig_call = s3fs.S3FileSystem._call_s3

    async def counting_call_s3(self, method, *args, **kw):
        s3_calls.append((method, kw.get("Key", "")))
        return await orig_call(self, method, *args, **kw)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counting_call_s3)

    root = refindex.open("s3://schema-bucket/x.refs.json", storage_options=s3, remote_options=s3)
    seen = {"": dict(root.attrs)}
    for name, node in root.members(max_depth=None):
        seen[name] = dict(node.attrs)
        if isinstance(node, zarr.Array):
            assert isinstance(node.shape, tuple) and node.dtype is not None
    assert keys == [".zmetadata"]  # one read for the whole hierarchy, no .zgroup/.zarray/.zattrs
    # On S3: the index is fetched, the HDF5 file is not read (at most its size/etag checked).
    assert ("get_object", "x.refs.json") in s3_calls
    assert not [c for c in s3_calls if c == ("get_object", "x.h5")]
    assert {"acq", "acq/raw", "acq/deep/er/names", "alias", "scalar"} <= set(seen)
    assert seen["acq/raw"]["units"] == "mV" and seen[""]["title"] == "sample"

    # Data still comes from the HDF5 file on S3, and still without metadata reads.
    got = root["acq/raw"][...]
    with h5py.File(path) as f:
        assert_same_values(f["acq/raw"][...], got)
    assert not [k for k in keys if k.rsplit("/", 1)[-1] in METADATA_NAMES]
    assert [k for k in keys if k.startswith("acq/raw/")]  # chunks went through the same filesystem


# ---------------------------------------------------------------- Zarr Object Model


def test_object_model_lists_every_node(tmp_path):
    path = tmp_path / "sample.h5"
    _write_sample(path)
    model = refindex.object_model(str(path))
    assert model["zarr_format"] == 2 and model["attributes"] == {"title": "sample", "version": 3}
    members = model["members"]
    assert sorted(members) == ["acq", "alias", "bytes", "scalar", "soft"]
    acq = members["acq"]
    assert "shape" not in acq and sorted(acq["members"]) == ["deep", "raw", "t"]
    raw = acq["members"]["raw"]
    assert raw["shape"] == [20, 30] and raw["chunks"] == [10, 15] and raw["dtype"] == "<i2"
    # no _FillValue attribute: no fill value for xarray to mask with (the plain convention, issue 21)
    assert raw["fill_value"] is None and raw["order"] == "C" and raw["dimension_separator"] == "."
    assert raw["zarr_format"] == 2
    codecs = [raw["compressor"]["id"]] + [c["id"] for c in raw["filters"] or []]
    assert "zlib" in codecs and "shuffle" in codecs
    assert raw["attributes"]["units"] == "mV" and raw["attributes"]["_ARRAY_DIMENSIONS"][0] == "t"
    assert members["alias"]["shape"] == [20, 30]
    assert np.isnan(acq["attributes"]["nan"])
    names = acq["members"]["deep"]["members"]["er"]["members"]["names"]
    assert names["shape"] == [2] and names["dtype"] == "<U2"  # vlen text as xarray shows it (docs/xarray.md)
    assert members["scalar"]["shape"] == [] and members["scalar"]["dtype"] == "<f8"
    assert members["bytes"]["dtype"] == "|S2"
    # Same model from the index dict and from a written index file.
    refs = refindex.scan(str(path))
    out = tmp_path / "sample.refs.json"
    refindex.formats.write_json(refs, out)
    assert schema.zom_json(refindex.object_model(refs)) == schema.zom_json(model)
    assert schema.zom_json(refindex.object_model(str(out))) == schema.zom_json(model)


def test_object_model_trimming(tmp_path):
    path = tmp_path / "sample.h5"
    _write_sample(path)
    top = refindex.object_model(str(path), depth=0)
    assert "members" not in top and top["attributes"]["title"] == "sample"
    one = refindex.object_model(str(path), depth=1)
    assert sorted(one["members"]) == ["acq", "alias", "bytes", "scalar", "soft"]
    assert "members" not in one["members"]["acq"]  # not listed, rather than empty
    two = refindex.object_model(str(path), depth=2, members_only=True)
    assert "members" not in two["members"]["acq"]["members"]["deep"]
    assert "attributes" not in json.dumps(two)
    assert two["members"]["acq"]["members"]["raw"]["shape"] == [20, 30]


def test_cli_prints_object_model(tmp_path, capsys):
    path = tmp_path / "sample.h5"
    _write_sample(path)
    assert cli_main(["schema", str(path), "--depth", "1"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json_roundtrip(refindex.object_model(str(path), depth=1))


# ---------------------------------------------------------------- checking against a template


def test_check_passes_against_own_model(tmp_path, capsys):
    path = tmp_path / "sample.h5"
    _write_sample(path)
    template = tmp_path / "template.json"
    template.write_text(schema.zom_json(refindex.object_model(str(path))))
    report = refindex.check(str(template), str(path))
    assert report.ok and report.differences == []
    refs = refindex.scan(str(path))
    assert refindex.check(json.loads(template.read_text()), refs).ok
    assert cli_main(["schema", "--check", str(template), str(path)]) == 0


def test_check_catches_each_difference(tmp_path, capsys):
    base, changed = tmp_path / "base.h5", tmp_path / "changed.h5"
    _write_sample(base)
    _write_sample(changed, "changed")
    template = tmp_path / "template.json"
    template.write_text(schema.zom_json(refindex.object_model(str(base))))
    report = refindex.check(str(template), str(changed))
    assert not report.ok
    by_path: dict[str, list[str]] = {}
    for p, message in report.differences:
        by_path.setdefault(p, []).append(message)
    assert by_path["/acq/deep/er/names"] == ["array is missing"]
    assert by_path["/acq/raw"] == ["attribute 'units' is missing"]
    assert by_path["/alias"] == ["attribute 'units' is missing"]  # a hard link: the same object
    assert len(by_path["/scalar"]) == 1 and "dtype" in by_path["/scalar"][0] and "<i4" in by_path["/scalar"][0]
    assert len(by_path["/bytes"]) == 1 and "2 dimension(s)" in by_path["/bytes"][0]
    assert set(by_path) == {"/acq/deep/er/names", "/acq/raw", "/alias", "/scalar", "/bytes"}
    assert report.as_dict()["ok"] is False and len(report.as_dict()["differences"]) == 5

    capsys.readouterr()
    assert cli_main(["schema", "--check", str(template), str(changed)]) == 1
    out = capsys.readouterr().out
    for p in by_path:
        assert f"{p}: " in out


def test_check_shape_pinning_and_values(tmp_path):
    path = tmp_path / "sample.h5"
    _write_sample(path)
    raw = {"shape": [20, 99], "dtype": ">i2"}  # byte order ignored; shape free unless pinned
    tmpl: dict[str, Any] = {"members": {"acq": {"members": {"raw": raw}}}}
    assert refindex.check(tmpl, str(path)).ok
    raw["pin_shape"] = True
    assert refindex.check(tmpl, str(path)).differences == [("/acq/raw", "shape is [20, 30], expected [20, 99]")]
    raw["shape"] = [20, None]  # null: any length on that axis
    assert refindex.check(tmpl, str(path)).ok
    tmpl["attributes"] = {"title": "other", "version": 0}
    assert refindex.check(tmpl, str(path)).ok  # attribute values free by default
    tmpl["pin_attributes"] = ["title"]
    assert refindex.check(tmpl, str(path)).differences == [("/", "attribute 'title' is 'sample', expected 'other'")]
    tmpl = {"members": {"acq": {"shape": [1]}, "scalar": {"members": {}}}}
    diffs = dict(refindex.check(tmpl, str(path)).differences)
    assert diffs == {"/acq": "expected an array, found a group", "/scalar": "expected a group, found an array"}


def test_bad_template_is_a_clear_error(tmp_path):
    path = tmp_path / "sample.h5"
    _write_sample(path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(refindex.RefindexError, match="template is not valid JSON"):
        refindex.check(str(bad), str(path))
    with pytest.raises(refindex.RefindexError, match="must be a ZOM group"):
        refindex.check({"shape": [1], "dtype": "<i4"}, str(path))
    with pytest.raises(refindex.RefindexError, match="neither a reference index .JSON or parquet. nor an HDF5 file: its JSON is invalid"):
        refindex.object_model(str(bad))


def test_batch_check_records_template_results_in_the_manifest(tmp_path):
    """`refindex batch --check TEMPLATE.json`: each index is checked, results land in the manifest."""
    import json

    import h5py
    import numpy as np

    from refindex.batch import run_batch
    from refindex.cli import main

    good = tmp_path / "good.h5"
    bad = tmp_path / "bad.h5"
    for path, dtype in ((good, "f8"), (bad, "i4")):
        with h5py.File(path, "w") as f:
            f.create_dataset("acq/raw", data=np.zeros((10, 3), dtype=dtype))
            f["acq/raw"].attrs["units"] = "V"
    template = tmp_path / "template.json"
    template.write_text(json.dumps(refindex.object_model(refindex.scan(str(good)))))

    report = run_batch([str(good), str(bad)], workers=0, progress=False, check=str(template))
    by_name = {r.source.rsplit("/", 1)[-1]: r for r in report.results}
    assert by_name["good.h5"].check == {"ok": True, "differences": []}
    assert not by_name["bad.h5"].check["ok"]
    assert [d["path"] for d in by_name["bad.h5"].check["differences"]] == ["/acq/raw"]
    assert not report.ok and [r.source for r in report.check_failed] == [str(bad)]
    rows = [json.loads(line) for line in open(report.manifest)]
    assert {r["source"].rsplit("/", 1)[-1]: r["check"]["ok"] for r in rows} == {"good.h5": True, "bad.h5": False}

    # A re-run (everything up to date) still checks, and the CLI exits 1 naming the path.
    assert main(["batch", str(good), str(bad), "--workers", "0", "--no-progress", "--check", str(template)]) == 1
