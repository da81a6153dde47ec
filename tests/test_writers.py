"""The streamed JSON writer: the same index as ``write_json(to_refs(tree))``, written atomically."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest

import refindex
from refindex import formats, pipeline
from refindex.checks import safety
from refindex.options import ScanOptions
from refindex.cli import main as cli_main
from refindex.errors import RefindexError
from refindex.model import ArrayNode, ChunkTable, GroupNode, Tree

from conftest import assert_same_values, consumer_open, zvalues
from test_features import _mixed_file
from test_parquet import _build


def _same_index(tree: Tree, tmp_path, block: int = formats.STREAM_BLOCK) -> dict:
    """Write ``tree`` both ways; assert same bytes and same (key, value) order; return the summary."""
    formats.write_json(formats.to_refs(tree), tmp_path / "dict.json")
    summary = formats.write_json_stream(tree, tmp_path / "stream.json", block=block)
    want, got = (tmp_path / "dict.json").read_bytes(), (tmp_path / "stream.json").read_bytes()
    a, b = json.loads(want), json.loads(got)
    assert list(a) == list(b) and list(a["refs"].items()) == list(b["refs"].items())
    assert a == b and want == got
    assert summary["bytes"] == len(got) and summary["keys"] == len(b["refs"])
    return summary


def _tree_of(path, **kw) -> Tree:
    return pipeline.scan_tree(str(path), ScanOptions.from_keywords(**kw))


@pytest.mark.parametrize("kw", [{}, {"contiguous_chunk_bytes": 4096}, {"inline_threshold": 0, "inline_dataset_threshold": 0},
                                {"inline_threshold": 10**6}])
def test_stream_equals_dict_for_feature_rich_file(tmp_path, kw):
    src = tmp_path / "mixed.h5"
    _build(src)
    tree = _tree_of(src, **kw)
    s = _same_index(tree, tmp_path)
    _same_index(tree, tmp_path, block=3)  # many blocks per array
    refs = json.loads((tmp_path / "stream.json").read_text())["refs"]
    assert s["chunks_referenced"] == sum(isinstance(v, list) for v in refs.values())
    assert s["inline_chunks"] == sum(isinstance(v, str) and v.startswith("base64:") for v in refs.values())


def test_stream_equals_dict_for_mixed_file(tmp_path):
    src = tmp_path / "m.h5"
    _mixed_file(src)
    _same_index(_tree_of(src), tmp_path)


def _table(coords, offsets, sizes, url=None) -> ChunkTable:
    c = np.asarray(coords, dtype=np.int64)
    return ChunkTable(c, np.asarray(offsets, np.uint64), np.asarray(sizes, np.uint64), url)


def test_stream_edge_cases(tmp_path):
    """Chunk both inlined and referenced, odd names, scalar, root array, another file's url, huge offsets."""
    t = Tree(url="s3://bucket/{odd} name.h5", provenance={"note": "ünïcode"})
    t.groups["/"] = GroupNode("/", attrs={"a": 1})
    t.groups['/q"uote\\d'] = GroupNode('/q"uote\\d')
    both = ArrayNode('/q"uote\\d/x{}%d', (4, 4), (2, 2), "<i4", 0,
                     refs=_table([[0, 0], [1, 1], [0, 1]], [10, 20, 2**63 + 5], [1, 2, 3]),
                     inline={"1.1": b"\x00\x01", "1.0": b"zz"})
    scalar = ArrayNode("/s", (), (), "<f8", None, scalar=True, refs=_table(np.zeros((1, 0)), [7], [8]))
    ext = ArrayNode("/ext", (3,), (1,), "<u1", 0, refs=_table([[2], [0]], [5, 1], [1, 1], url="other/file.h5"))
    odd_inline = ArrayNode("/é", (2,), (1,), "<u1", 0, inline={"0": b"a", "1": b"b"})
    empty = ArrayNode("/e", (0,), (1,), "<u1", 0, refs=ChunkTable.empty(1))
    for a in (both, scalar, ext, odd_inline, empty):
        t.arrays[a.path] = a
    s = _same_index(t, tmp_path)
    _same_index(t, tmp_path, block=1)
    assert (s["chunks_referenced"], s["inline_chunks"]) == (3 + 1 + 2, 1 + 2)
    refs = json.loads((tmp_path / "stream.json").read_text())["refs"]
    assert refs['q"uote\\d/x{}%d/1.1'] == ["{{u}}", 20, 2]  # the reference wins, as in to_refs

    root = Tree(url="f.h5")
    root.arrays["/"] = ArrayNode("/", (2,), (1,), "<u1", 0, refs=_table([[0], [1]], [1, 2], [1, 1]))
    _same_index(root, tmp_path)


def test_atomic_on_failure(tmp_path):
    src = tmp_path / "mixed.h5"
    _build(src)
    tree = _tree_of(src, inline_threshold=0)
    out = tmp_path / "out.json"
    out.write_text("previous index")
    broken = Tree(url=tree.url, groups=tree.groups, arrays=dict(tree.arrays))  # fails after other arrays were written
    broken.arrays["/zz"] = ArrayNode("/zz", (4,), (1,), "<u1", 0,
                                     refs=ChunkTable(np.arange(4).reshape(4, 1), np.array([1, 2, 3, -1]),
                                                     np.ones(4, np.int64)))
    with pytest.raises(RefindexError, match="cannot write the index as JSON"):
        formats.write_json_stream(broken, out, block=1)
    assert out.read_text() == "previous index"
    assert sorted(os.listdir(tmp_path)) == ["mixed.h5", "out.json"]  # no temporary left behind

    bad = Tree(url="f.h5")
    bad.arrays["/bad\udcff"] = ArrayNode("/bad\udcff", (1,), (1,), "<u1", 0, inline={"0": b"x"})
    with pytest.raises(RefindexError, match="cannot write the index as JSON"):
        formats.write_json_stream(bad, tmp_path / "new.json")
    assert sorted(os.listdir(tmp_path)) == ["mixed.h5", "out.json"]


def test_safety_gate_guards_every_index(tmp_path):
    """One gate for every format: the head of an index names only allowed codecs and no secret."""
    t = Tree(url="s3://bucket/abcd1234secret/f.h5")
    t.groups["/"] = GroupNode("/")
    t.arrays["/x"] = ArrayNode("/x", (1,), (1,), "<u1", 0, compressor={"id": "pickle"}, inline={"0": b"x"})
    with pytest.raises(RefindexError, match="allowlist"):
        safety.check_publishable(formats.head_refs(t), None)
    t.arrays["/x"].compressor = None
    with pytest.raises(RefindexError, match="secret"):
        safety.check_publishable(formats.head_refs(t), {"token": "abcd1234secret"})
    safety.check_publishable(formats.head_refs(t), {"token": "other"})


def test_scan_to_file_streamed_reads_back(tmp_path):
    src = tmp_path / "mixed.h5"
    _build(src)
    with_refs = refindex.scan_to_file(str(src), tmp_path / "dict.json", return_refs=True)
    refs = with_refs.pop("refs")  # the dict, written from the dict
    summary = refindex.scan_to_file(str(src), tmp_path / "stream.json")  # streamed from the chunk tables
    assert set(summary) == {"format", "keys", "chunks_referenced", "inline_chunks", "bytes", "skipped", "arrays",
                            "source"}
    assert (tmp_path / "dict.json").read_bytes() == (tmp_path / "stream.json").read_bytes()
    assert summary == with_refs == pipeline.summary_of(refs, tmp_path / "dict.json")
    g = consumer_open(json.loads((tmp_path / "stream.json").read_text()))
    with h5py.File(src) as f:
        for name in ("chunked", "sparse", "acquisition/ElectricalSeries/data", "processing/module.v2/odd name"):
            assert_same_values(f[name][...], zvalues(g[name]))
    # isolate builds the dict in the worker: written the same, summary returned
    iso = refindex.scan_to_file(str(src), tmp_path / "iso.json", return_refs=False, isolate=True, timeout=60)
    assert iso == summary and (tmp_path / "iso.json").read_bytes() == (tmp_path / "dict.json").read_bytes()


def test_cli_scan_streams_same_bytes(tmp_path, capsys):
    src = tmp_path / "mixed.h5"
    _build(src)
    refindex.scan_to_file(str(src), tmp_path / "dict.json")
    assert cli_main(["scan", str(src), "-o", str(tmp_path / "cli.json")]) == 0
    assert (tmp_path / "cli.json").read_bytes() == (tmp_path / "dict.json").read_bytes()
    n = len(json.loads((tmp_path / "dict.json").read_text())["refs"])
    assert f"{n} keys" in capsys.readouterr().err


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.uint32])
def test_format_rows_equals_percent_formatting(dtype):
    """The column-wise formatter gives exactly the bytes of %-formatting each row."""
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    for n in (0, 1, 3, 2_000):
        for hi in (1, 10, 9_999, 10_000, 10**7, int(info.max)):
            a = rng.integers(0, 1_000, n)
            b = rng.integers(0, hi, n, dtype=dtype, endpoint=True)
            want = b"".join(b',"x/%d.%d":["{{u}}",%d]' % (i, j, 31) for i, j in zip(a.tolist(), b.tolist()))
            got = formats.format_rows([b',"x/', a, b".", b, b'":["{{u}}",', np.full(n, 31), b"]"])
            assert got == want
    edge = np.array([0, 9, 10, 9_999, 10_000, 2**63 - 1, 2**63, 2**64 - 1], np.uint64)
    assert formats.format_rows([b"<", edge, b">"]) == b"".join(b"<%d>" % v for v in edge.tolist())
    with pytest.raises(ValueError, match="negative"):
        formats.format_rows([b"<", np.array([3, -1]), b">"])


def test_inline_rows_matches_comparing_keys_as_text():
    """The column-wise overlap of a chunk table with inline chunks (what the JSON writers and the v3
    hierarchy use) equals comparing key text, including its fallbacks (odd keys, huge grids, 0-d)."""
    from refindex.model import V2_KEYS, inline_rows

    def by_text(coords, keys):
        wanted = set(keys)
        return np.array([k in wanted for k in V2_KEYS.keys(coords)], dtype=bool)

    rng = np.random.default_rng(3)
    for ndim in (1, 2, 3):
        coords = rng.integers(0, 40, size=(5000, ndim)).astype(np.int64)
        keys = V2_KEYS.keys(coords[rng.integers(0, 5000, 30)]) + V2_KEYS.keys(rng.integers(0, 60, (30, ndim)))
        for k in (keys, keys[:1], [], keys + ["x.y"[: 2 * ndim - 1]], keys + ["7"] * (ndim > 1)):
            np.testing.assert_array_equal(inline_rows(coords, k), by_text(coords, k))
    huge = np.array([[2**40, 3], [5, 2**40], [1, 1]], dtype=np.int64)  # a linear index would overflow
    np.testing.assert_array_equal(inline_rows(huge, ["5.1099511627776", "1.1"]), [False, True, True])
    unsigned = np.array([[2**63 + 1], [4]], dtype=np.uint64)
    np.testing.assert_array_equal(inline_rows(unsigned, [str(2**63 + 1)]), [True, False])
    assert inline_rows(np.zeros((1, 0), np.int64), ["0"]).tolist() == [True]
    assert inline_rows(np.zeros((0, 2), np.int64), ["0.0"]).tolist() == []


def test_writing_parquet_imports_no_pandas(tmp_path):
    """pyarrow's ``pa.array`` imports pandas (~0.45 s) on first use; the parquet writers build their
    columns from numpy buffers instead, so a parquet index costs no pandas import (v2 and v3)."""
    import subprocess
    import sys

    src = tmp_path / "m.h5"
    _build(src)
    code = ("import sys, refindex\n"
            f"refindex.scan_to_file({str(src)!r}, {str(tmp_path / 'v2.parq')!r}, format='parquet')\n"
            f"refindex.scan_to_file({str(src)!r}, {str(tmp_path / 'v3.parq')!r}, format='parquet', zarr_format=3)\n"
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
