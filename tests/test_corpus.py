"""Every file of ../shared/corpus (real HDF5 files written by other projects).

Each file is scanned and every dataset read through the index with fsspec+zarr is
compared with h5py (hdf5plugin loaded, so h5py reads every filter it can).  The
corpus lives beside the repository on our machines and in CI; elsewhere these tests
skip with the reason.
"""

from __future__ import annotations

import csv
import json
import re
import time
import warnings

import pytest

import refindex
from refindex.checks import safety
from refindex.model import external_sources
from refindex.scanner import _pages

from corpus import CORPUS  # noqa: E402
from h5compare import assert_h5py_road_equal  # noqa: E402
MANIFEST = CORPUS / "MANIFEST.tsv"

pytestmark = pytest.mark.skipif(not MANIFEST.exists(), reason=f"HDF5 corpus not found at {CORPUS}")


def _rows() -> list[dict[str, str]]:
    if not MANIFEST.exists():
        return []
    with open(MANIFEST, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


ROWS = _rows()

# What cannot be represented, per file: (object path, words the reason must contain).
# Each is something h5py itself cannot read, so there is no value to index.
EXPECTED_UNSUPPORTED: dict[str, list[tuple[str, str]]] = {
    # bitgroom filter: no plugin in hdf5plugin, no zarr codec
    "hdf5_plugins/h5ex_d_bitgroom.h5": [("/DS1", "h5py cannot read")],
    # variable-length sequences of region references crash h5py
    "hdf5/h5repack_attr_refs.h5": [("/group_main/dset_main", "region references inside variable-length data")],
}

SLOW_SECONDS = 10.0  # a hang guard, not a benchmark (benchmarks/ has the figures)


def _path(row: dict[str, str]) -> str:
    return str(CORPUS / row["relpath"])


@pytest.mark.parametrize("row", ROWS, ids=[r["relpath"] for r in ROWS])
def test_corpus_file_reads_exactly(row: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    rel = row["relpath"]
    path = _path(row)
    if row["notes"].startswith("NOT HDF5"):
        with pytest.raises(refindex.NotHDF5Error, match="not an HDF5 file"):
            refindex.scan(path)
        return

    expected = EXPECTED_UNSUPPORTED.get(rel, [])
    if expected:
        # Strict mode names the file, the object and the reason ...
        with pytest.raises(refindex.RefindexError) as err:
            refindex.scan(path)
        assert path in str(err.value)
        assert any(p == err.value.path or (err.value.path or "").startswith(p) for p, _ in expected), err.value
    t0 = time.perf_counter()
    refs = refindex.scan(path, on_unsupported="skip")  # ... and skip mode records it in the index
    elapsed = time.perf_counter() - t0
    assert elapsed < SLOW_SECONDS, f"{rel} took {elapsed:.1f} s to scan"

    # Every index refindex makes of the corpus names only allowlisted codecs (never pickle), the
    # indexes of the files its external links point into too.
    indexes = [refs]
    if external_sources(refs):
        try:
            followed = refindex.scan(path, on_unsupported="skip", follow_external=True)
        except refindex.RefindexError:  # (a link that may not be followed: its file has no index here)
            followed = {"refindex": {}}
        indexes += [e["refs"] for e in (followed["refindex"].get("external") or {}).values() if "refs" in e]
    for r in indexes:
        assert safety.unsafe_codecs(r) == [], rel
        assert "pickle" not in json.dumps(r["refs"].get(".zmetadata", "")), rel

    skipped = refs["refindex"].get("skipped", [])
    for s in skipped:
        assert any(s["path"].startswith(p) and words in s["reason"] for p, words in expected), \
            f"unexpected unsupported object in {rel}: {s}"
    for p, words in expected:
        assert any(s["path"].startswith(p) and words in s["reason"] for s in skipped), (rel, p, skipped)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = refindex.verify(path, refs)
    bad = [r for r in report.results if r.status in ("different", "unreadable", "missing")]
    assert not bad, "\n".join(f"{r.status} {r.path}: {r.detail}" for r in bad)
    # Datasets h5py cannot read are reported, never hidden: the manifest names how many
    # h5py cannot read, and external raw data resolves against the working directory.
    unreadable = sorted(r.path for r in report.results if r.status == "h5py-unreadable" and "external" not in r.path)
    m = re.search(r"h5py cannot read (\d+) dset", row["notes"])
    assert len(unreadable) <= (int(m.group(1)) if m else 0), f"{rel}: h5py cannot read {unreadable}"
    # The h5py road (issue #23): h5py over the index's pages sees the file as h5py sees it.
    assert refs["refindex"].get("pages"), "every index carries pages by default"
    assert_h5py_road_equal(path, refs)
    if refs["refindex"]["pages"].get("in_file"):  # small: fetched whole by a reader; its pages as a larger file's
        monkeypatch.setattr(_pages, "IN_FILE_MAX", -1)
        carried = json.loads(json.dumps(refindex.scan(path, on_unsupported="skip")))
        assert carried["refindex"]["pages"]["bytes"] > 0
        assert_h5py_road_equal(path, carried)


# xarray over the corpus (default decoding, against h5netcdf): tests/test_xarray.py.


def test_corpus_opaque_attributes_keep_their_bytes() -> None:
    """h5py has no conversion path for these opaque attributes; the index keeps their raw bytes."""
    import base64
    import json

    import h5py
    import numpy as np

    path = CORPUS / "hdf5" / "tattr2.h5"
    if not path.exists():
        pytest.skip(f"{path} not in the corpus")
    attrs = json.loads(refindex.scan(str(path))["refs"][".zattrs"])
    with h5py.File(path) as f:
        for name in ("opaque", "opaque2D", "opaque3D"):
            aid = h5py.h5a.open(f.id, name.encode())
            raw = np.empty(aid.shape, dtype=f"V{aid.get_type().get_size()}")
            aid.read(raw, mtype=aid.get_type())
            got = attrs[name]
            assert got["zarr_dtype"] == "opaque" and got["shape"] == list(aid.shape)
            assert base64.b64decode(got["base64"]) == raw.tobytes()


@pytest.mark.parametrize("row", ROWS, ids=[r["relpath"] for r in ROWS])
def test_corpus_file_opens_on_the_fly_without_an_index(row: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``h5py_file(url, cache=False)`` makes no index (refindex.scanner._tables): libhdf5 reads the bytes
    the prefetch brought, whose every span must be the file's, and h5py sees the file as it sees the
    file itself.  The scan runs instead only where the prefetch could not see the whole tree."""
    import uuid

    import fsspec
    import h5py
    import numpy as np

    from h5compare import assert_same_h5
    from refindex.read.h5py_road import _beside

    if row["notes"].startswith("NOT HDF5"):
        pytest.skip("not an HDF5 file")
    path = _path(row)
    data = open(path, "rb").read()
    url = f"memory://refindex-fly-{uuid.uuid4().hex}/{re.sub(r'[^A-Za-z0-9_-]', '_', row['relpath'])}.h5"
    fsspec.filesystem("memory").pipe_file(url, data)
    taken: list = []
    light = _beside.light_road

    def recorded(opened, *args, **kwargs):
        road = light(opened, *args, **kwargs)
        taken.append((road, opened.src.seen.complete))
        return road

    monkeypatch.setattr(_beside, "light_road", recorded)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", refindex.RefindexWarning)  # links into other files: told, compared
            got = refindex.h5py_file(url, cache=False)
        with h5py.File(path, "r") as want:
            elsewhere: list[str] = []
            if taken and taken[0][0] is not None:
                pages = taken[0][0].pages
                at = 0
                for s, e in zip(np.asarray(pages.starts).tolist(), np.asarray(pages.ends).tolist()):
                    assert pages.data[at:at + e - s] == data[s:e], f"bytes {s}-{e} are not the file's"
                    at += e - s
                elsewhere = pages.reads_elsewhere
            elif taken:
                assert not taken[0][1], "scanned although the prefetch saw the whole tree"
            unread = {p for p, _ in EXPECTED_UNSUPPORTED.get(row["relpath"], [])} | set(elsewhere)
            assert_same_h5(want, got, unread)
        got.close()
    finally:
        fsspec.filesystem("memory").rm(url.rsplit("/", 1)[0], recursive=True)
