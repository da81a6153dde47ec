"""The h5py road fetches the chunks an h5py read needs, read off the read itself (issue 44).

libhdf5 asks the road's file object for one chunk at a time; h5py's ``Dataset.__getitem__``
(or ``read_direct``) up the same thread's stack holds the selection, and the index's grid
says which stored chunks it touches: they are fetched at once, with the chunk index's nodes
when the pages left them out; an array's first selection, when small, also brings the chunks
after it up to FIRST_LOOK bytes (a first look is mostly followed by more of the series).  Counted at the loopback server
(tests/webserver.py): requests, their ranges and the bytes sent; values against h5py on the file.
"""

from __future__ import annotations

import json
from concurrent.futures import Future

import h5py
import numpy as np
import pytest

import refindex
import webserver

pytestmark = pytest.mark.timeout(120)

ROWS, COLS, CHUNKS = 256, 32, 2400  # 16 KiB chunks, written in order: a chunk index too large for the pages
CHUNK = ROWS * COLS * 2
GAP = 64 << 10  # ranges this close share a request (refindex.source's MERGE_GAP)


@pytest.fixture(scope="module")
def long_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("long") / "long.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", (ROWS * CHUNKS, COLS), "i2", chunks=(ROWS, COLS))
        for i in range(CHUNKS):
            d[i * ROWS:(i + 1) * ROWS] = np.arange(i * ROWS * COLS, (i + 1) * ROWS * COLS).reshape(ROWS, COLS) % 32749
        starts = np.asarray([d.id.get_chunk_info(i).byte_offset for i in range(CHUNKS)])
    with webserver.serve() as server:
        url = server.put("long.h5", path.read_bytes())
        refs = json.loads(json.dumps(refindex.scan(url, progress=False)))
        assert "/x" in refs["refindex"]["pages"]["index_ranges"]  # its nodes stay in the file
        yield path, server, refs, starts


def _settled(f: h5py.File) -> None:
    """Wait for every fetch the road started (a round trip counts once its last request is in)."""
    road = f.refindex_file
    waiting = [fut for _, fut, _, _ in road.ahead.buffers.values()]
    waiting += [d for _, _, d in road._fetched if isinstance(d, Future)]
    for fut in waiting:
        fut.exception(timeout=30)


def _is_node(sent: tuple, refs: dict) -> bool:
    """Is an answer a node of the chunk index (the pages say where they lie), not chunks?"""
    starts, ends = refindex.formats.pages_of_document(refs["refindex"]["pages"], inline=None).index_ranges["/x"]
    a, b = (int(x) for x in sent[1][6:].split("-"))
    i = int(np.searchsorted(starts, a, side="right")) - 1
    return i >= 0 and b < int(ends[i])


def _node_bytes_in(sent: list, refs: dict) -> int:
    """Bytes of the chunk index's nodes inside the answers ``sent`` (a leaf written between chunks comes in
    their request)."""
    starts, ends = refindex.formats.pages_of_document(refs["refindex"]["pages"], inline=None).index_ranges["/x"]
    total = 0
    for _, rng, _ in sent:
        a, b = (int(x) for x in rng[6:].split("-"))
        total += int(np.clip(np.minimum(ends, b + 1) - np.maximum(starts, a), 0, None).sum())
    return total


def _chunks_in(sent: list, starts: np.ndarray) -> set[int]:
    """The chunks (by place) whose bytes the answers ``sent`` carried, whole or in part."""
    out: set[int] = set()
    for _, rng, _ in sent:
        a, b = (int(x) for x in rng[6:].split("-"))
        first = max(0, int(np.searchsorted(starts, a, side="right")) - 1)
        last = int(np.searchsorted(starts, b, side="right"))
        out |= {i for i in range(first, last) if starts[i] <= b and starts[i] + CHUNK > a}
    return out


def test_a_window_comes_in_one_round_trip_with_its_chunks_and_no_other(long_file):
    """800 chunks in the middle of the dataset, the first read of it (its chunk index not fetched yet):
    one round trip for the index's nodes and every chunk of the window; no chunk outside it (before
    issue 44: 8 round trips, chunks past the window's end fetched ahead, 1.23x the bytes)."""
    path, server, refs, starts = long_file
    with refindex.h5py_file(refs, check_source=False) as f, h5py.File(path, "r") as want:
        before = len(server.sent)
        got = f["x"][400 * ROWS:1200 * ROWS]
        _settled(f)
        sent = [s for s in server.sent[before:] if s[0] == "/long.h5"]
        np.testing.assert_array_equal(got, want["x"][400 * ROWS:1200 * ROWS])
        assert f.refindex_file.stats.fetch.round_trips == 1
        assert _chunks_in(sent, starts) == set(range(400, 1200))
        nodes = refindex.formats.pages_of_document(refs["refindex"]["pages"], inline=None).index_ranges["/x"]
        assert sum(n for _, _, n in sent) <= got.nbytes + int((nodes[1] - nodes[0]).sum()) + 64 * (len(nodes[0]) + 1)


def test_scattered_reads_fetch_their_own_chunks_only(long_file):
    """An array's first look (one row) brings its chunk and those after it, up to FIRST_LOOK bytes, in one
    round trip with the chunk index's nodes.  After it, single rows here and there, a strided slice, a list
    of rows, ``read_direct`` and ``np.asarray`` of a part: each read fetches the chunks its selection
    touches (before issue 44: each miss fetched 6 MiB ahead)."""
    from refindex.read.h5py_road._file import FIRST_LOOK

    path, server, refs, starts = long_file
    looked_to = FIRST_LOOK // CHUNK  # the chunks of the first look: 0 .. looked_to
    rng = np.random.default_rng(3)
    rows = np.sort(rng.choice(np.arange((looked_to + 1) * ROWS, ROWS * CHUNKS), 12, replace=False))
    with refindex.h5py_file(refs, check_source=False) as f, h5py.File(path, "r") as want:
        before = len(server.sent)
        np.testing.assert_array_equal(f["x"][0], want["x"][0])  # the first look, and the index's nodes
        _settled(f)
        sent = [s for s in server.sent[before:] if not _is_node(s, refs)]
        looked = _chunks_in(sent, starts)
        assert looked == set(range(looked_to + 1)) and f.refindex_file.stats.fetch.round_trips == 1
        assert sum(n for _, _, n in sent) <= FIRST_LOOK + CHUNK + (len(sent) - 1) * GAP
        cases = [np.s_[int(r)] for r in rows[:4]] + [np.s_[505 * ROWS + 3:509 * ROWS:ROWS * 2, 4], np.s_[rows],
                                                      np.s_[-1]]
        for sel in cases:
            before = len(server.sent)
            got = f["x"][sel]
            _settled(f)
            np.testing.assert_array_equal(got, want["x"][sel], err_msg=str(sel))
            along = sel[0] if isinstance(sel, tuple) else sel  # (rows only: a chunk has every column)
            expected = set(np.unique(np.arange(ROWS * CHUNKS)[along] // ROWS).tolist())
            sent = [s for s in server.sent[before:] if not _is_node(s, refs)]  # (nodes: as libhdf5 walks to them)
            fetched = _chunks_in(sent, starts)  # (chunks a gap apart share a request)
            # (a leaf of the chunk index written after a chunk comes in that chunk's request, and with it the
            # chunks between them, at most a gap: refindex.source merges ranges that close)
            near = GAP // CHUNK
            assert expected <= fetched <= set(range(min(expected) - near, max(expected) + near + 1)), sel
            chunk_bytes = sum(n for _, _, n in sent) - _node_bytes_in(sent, refs)
            assert chunk_bytes <= len(expected) * CHUNK + len(sent) * GAP, sel
        before = len(server.sent)
        out = np.zeros((ROWS * 3, COLS), "i2")
        f["x"].read_direct(out, np.s_[ROWS * 1000:ROWS * 1003])
        _settled(f)
        np.testing.assert_array_equal(out, want["x"][ROWS * 1000:ROWS * 1003])
        assert _chunks_in(server.sent[before:], starts) == {1000, 1001, 1002}
        before = len(server.sent)
        np.testing.assert_array_equal(np.asarray(f["x"]), want["x"][()])  # read_direct of all of it
        _settled(f)
        sent = server.sent[before:]
        # every chunk fetched again (those read before were dropped once read), but those of the first look
        # not read yet, which are still held
        assert _chunks_in(sent, starts) == set(range(CHUNKS)) - (looked - {0})
        assert sum(n for _, _, n in sent) <= CHUNKS * CHUNK * 1.01  # (and the nodes between them)


def test_low_level_reads_are_still_read_ahead_by_guess(long_file):
    """A read through h5py's low-level API has no selection on the stack: the guesses serve it, the
    file's values, its chunks fetched ahead."""
    path, server, refs, starts = long_file
    with refindex.h5py_file(refs, check_source=False) as f, h5py.File(path, "r") as want:
        d = f["x"]
        out = np.zeros((ROWS * 50, COLS), "i2")
        space = d.id.get_space()
        space.select_hyperslab((ROWS * 700, 0), (ROWS * 50, COLS))
        d.id.read(h5py.h5s.create_simple(out.shape), space, out)
        np.testing.assert_array_equal(out, want["x"][ROWS * 700:ROWS * 750])
        assert f.refindex_file.stats.from_ahead >= 49
        assert not f.refindex_file.ahead.plans  # (no plan: the guesses did)


@pytest.mark.parametrize("form", ["parquet", "json-v3"])
def test_every_index_form_gives_the_grid(long_file, tmp_path, form):
    """Parquet and zarr v3 indexes name the chunks' places as JSON v2 does: a window (the array's first
    look: with the chunks after it, up to FIRST_LOOK bytes in all), one round trip."""
    from refindex.read.h5py_road._file import FIRST_LOOK

    path, server, refs, starts = long_file
    url = server.url("long.h5")
    if form == "parquet":
        target = str(tmp_path / "long.parq")
        refindex.scan_to_parquet(url, target, progress=False)
    else:
        target = refindex.scan(url, progress=False, zarr_format=3)
    with refindex.h5py_file(target, check_source=False) as f, h5py.File(path, "r") as want:
        before = len(server.sent)
        got = f["x"][1000 * ROWS + 17:1100 * ROWS - 3, 5:9]
        _settled(f)
        np.testing.assert_array_equal(got, want["x"][1000 * ROWS + 17:1100 * ROWS - 3, 5:9])
        assert f.refindex_file.stats.fetch.round_trips == 1
        assert _chunks_in(server.sent[before:], starts) == set(range(1000, 1000 + FIRST_LOOK // CHUNK + 1))


def test_the_chunks_a_selection_touches_are_those_of_its_elements():
    """Grid places from indices alone, against every element's chunk (numpy's own indexing)."""
    from refindex.read.h5py_road._selection import wanted_chunks

    shape, chunks = (103, 17, 9), (10, 4, 3)
    grid = [-(-s // c) for s, c in zip(shape, chunks)]
    rng = np.random.default_rng(0)
    cases = [(), (Ellipsis,), (5,), (-1,), (slice(3, 50),), (slice(3, 99, 7), 2), (slice(None, None, 25), Ellipsis, 1),
             (np.array([1, 5, 90]), slice(2, 3)), ([0, 50, 102],), (slice(10, 10),), (Ellipsis, slice(0, 9, 4)),
             (slice(1, 100, 3), slice(0, 17, 5), slice(2, 9, 2)), (np.arange(103) % 7 == 0,), (-5, -3, -1),
             (rng.random(shape) < 0.01,), ("field", slice(4, 8))]
    for args in cases:
        mask = np.zeros(shape, bool)
        mask[tuple(a for a in args if not isinstance(a, str))] = True
        coords = np.nonzero(mask)
        want = np.unique(np.ravel_multi_index(tuple(x // c for x, c in zip(coords, chunks)), grid))
        np.testing.assert_array_equal(wanted_chunks(args, shape, chunks), want, err_msg=str(args))
    assert wanted_chunks((slice(None, None, -1),), shape, chunks) is None  # h5py refuses it: not guessed
