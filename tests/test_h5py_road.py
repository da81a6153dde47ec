"""The h5py road (issue #23): a real ``h5py.File`` whose metadata comes from the index's pages.

Consumers decide: unchanged pynwb ``NWBHDF5IO`` over ``refindex.h5py_file`` reads every NWB
file of the suite equal, field by field, to ``NWBHDF5IO`` on the file; h5py sees every
corpus file as it sees the file itself (every link, dataset, attribute and reference: in
tests/test_corpus.py, over the index that test makes anyway);
nwbinspector reports the same; dandi-cli's ``isinstance`` checks hold.  Remote: a loopback
HTTP server (Range, ETag, Last-Modified) that logs every request, and moto's S3 server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np
import pytest

import refindex

import nwbcompare  # noqa: E402
from h5compare import assert_same_h5  # noqa: E402
import webserver
from waiting import until

pytestmark = pytest.mark.timeout(240)


def index(path, **kw) -> dict:
    """refindex.scan through a JSON round trip (what a reader of the JSON file gets)."""
    return json.loads(json.dumps(refindex.scan(str(path), **kw), allow_nan=True))


def stats(f: h5py.File):
    return f.refindex_file.stats


def nwb_read(**kw):
    import pynwb

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        io = pynwb.NWBHDF5IO(mode="r", **kw)
        return io, io.read()


def _chunked_file(path: Path) -> None:
    rng = np.random.default_rng(5)
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=rng.integers(0, 1000, (4000, 8), dtype="i4"), chunks=(100, 8),
                         compression="gzip")
        g = f.create_group("group")
        g.attrs["title"] = "a group"
        g.create_dataset("small", data=np.arange(5.0))
        f["link"] = h5py.SoftLink("/group/small")
        f.create_dataset("refs", data=[g.ref, f["data"].ref], dtype=h5py.ref_dtype)


@pytest.fixture(scope="module")
def site(tmp_path_factory, nwb_files):
    """A loopback server holding an NWB file and a chunked plain file, with their indexes."""
    folder = tmp_path_factory.mktemp("site")
    (folder / "session.nwb").write_bytes(Path(nwb_files["main"]).read_bytes())
    _chunked_file(folder / "data.h5")
    with webserver.serve(folder=folder) as server:
        base = server.base
        for name in ("session.nwb", "data.h5"):
            refs = refindex.scan(f"{base}/{name}")  # as published: its ETag recorded, what a freshness check asks
            (folder / f"{name}.json").write_text(json.dumps(refs))
        yield folder, server, base


# ---------------------------------------------------------------- NWB files, local
def test_every_nwb_file_reads_through_h5py_file_as_from_the_file(nwb_files):
    """Unchanged NWBHDF5IO over h5py_file equals NWBHDF5IO on the file, field by field, for every NWB file
    of the suite; pynwb's open is served from the pages alone.  A file with external links (h5py's
    file-object driver cannot follow them) says so when opened and fails loudly when one is followed,
    and open_nwb's default reader reads it through the zarr road instead."""
    linked = 0
    for name, path in nwb_files.items():
        refs = index(path)
        hio, want = nwb_read(path=str(path))
        try:
            if refs["refindex"]["pages"]["external_links"]:
                linked += 1
                with pytest.warns(refindex.RefindexWarning, match="external link"):
                    f = refindex.h5py_file(refs)
                with pytest.raises(Exception, match="cannot follow an external link"):
                    nwb_read(file=f)
                f.close()
                got = refindex.open_nwb(refs)
                assert type(got.refindex_io).__name__ != "NWBHDF5IO"
                assert nwbcompare.assert_same_nwb(want, got) > 10, name
                got.refindex_io.close()
                continue
            f = refindex.h5py_file(refs)
            io, got = nwb_read(file=f)
            try:
                assert stats(f).from_source == 0, (name, stats(f).missed)
                assert nwbcompare.assert_same_nwb(want, got) > 10, name
            finally:
                io.close()
                f.close()
        finally:
            hio.close()
    assert linked >= 1  # the suite's linking.nwb


def test_text_values_in_several_heap_collections_are_served_from_the_pages(tmp_path, monkeypatch):
    """A text array whose strings fill several global heap collections (an electrodes table's locations,
    which pynwb reads while it opens a file) is carried up to TEXT_MAX; numbers of the same size stay in
    the file (their values are in the index's chunks, and nobody reads them at open)."""
    from refindex.scanner import _pages

    monkeypatch.setattr(_pages, "IN_FILE_MAX", -1)  # a small file: its pages as a larger file's

    path = tmp_path / "text.h5"
    words = [f"brain area {i} " * 6 for i in range(200)]  # ~17 KB of strings: five collections of 4 KiB
    with h5py.File(path, "w") as f:
        f.create_dataset("location", data=words, dtype=h5py.string_dtype())
        f.create_dataset("numbers", data=np.arange(2500, dtype="<f8"))  # 20 KB
    for name, from_pages in (("location", True), ("numbers", False)):
        f = refindex.h5py_file(refindex.scan(str(path)))
        try:
            got = f[name][()]
            elsewhere = stats(f).from_source + stats(f).from_ahead  # reads the pages did not serve
            assert (elsewhere == 0) == from_pages, (name, stats(f))
        finally:
            f.close()
        with h5py.File(path, "r") as h:
            assert np.array_equal(got, h[name][()])
    nbytes = sum(len(w) for w in words)
    assert _pages.DATA_MAX < nbytes < _pages.TEXT_MAX  # the rule this test is about


def test_h5py_file_is_an_h5py_file_for_dandi_style_checks(nwb_files):
    f = refindex.h5py_file(index(nwb_files["main"]))
    try:
        assert isinstance(f, h5py.File)
        assert isinstance(f["acquisition"], h5py.Group) and isinstance(f["/general"], h5py.Group)
        assert isinstance(f["acquisition/raw/data"], h5py.Dataset)
        assert f.mode == "r" and f.attrs["nwb_version"]
        with pytest.raises((OSError, ValueError)):
            f.create_group("new")  # read-only
    finally:
        f.close()


def test_nwbinspector_reports_the_same_over_h5py_file(nwb_files):
    from nwbinspector import inspect_nwbfile_object

    def messages(nwbfile):
        return sorted((m.check_function_name, str(m.importance), m.object_type, m.object_name, m.location,
                       m.message) for m in inspect_nwbfile_object(nwbfile))

    path = nwb_files["main"]
    f = refindex.h5py_file(index(path))
    io, got = nwb_read(file=f)
    hio, want = nwb_read(path=str(path))
    try:
        expected = messages(want)
        assert expected, "the test file should make nwbinspector say something"
        assert messages(got) == expected
    finally:
        io.close()
        hio.close()
        f.close()


def test_open_nwb_reads_with_h5py_when_asked(nwb_files):
    path = nwb_files["hardlink"]
    got = refindex.open_nwb(index(path), reader="h5py")
    hio, want = nwb_read(path=str(path))
    try:
        assert type(got.refindex_io).__name__ == "NWBHDF5IO"
        assert nwbcompare.assert_same_nwb(want, got) > 5
    finally:
        hio.close()
        got.refindex_io.close()
    with pytest.raises(ValueError, match="reader"):
        refindex.open_nwb(index(path), reader="netcdf")


# ---------------------------------------------------------------- index forms
@pytest.mark.parametrize("form", ["v3", "parquet", "parquet-v3", "no-pages"])
def test_every_index_form_carries_the_pages(tmp_path, form):
    path = tmp_path / "data.h5"
    _chunked_file(path)
    kw = {"zarr_format": 3} if form.endswith("v3") else {}
    if form == "no-pages":
        target = index(path, pages=False)
        assert "pages" not in target["refindex"] and refindex.info(target)["pages"] is None
    elif form.startswith("parquet"):
        target = str(tmp_path / "data.parq")
        refindex.scan_to_parquet(str(path), target, **kw)
        assert refindex.info(target)["pages"]["bytes"] > 0
    else:
        target = index(path, **kw)
        assert target["refindex"]["pages"]["bytes"] > 0
    f = refindex.h5py_file(target)
    with h5py.File(path, "r") as want:
        try:
            assert_same_h5(want, f)
            served = stats(f)
            assert (served.from_pages > 0) == (form != "no-pages")
        finally:
            f.close()


def test_icechunk_index_carries_the_pages_beside_its_commits(tmp_path, collect_in_main_thread):
    pytest.importorskip("icechunk")
    path = tmp_path / "data.h5"
    _chunked_file(path)
    repo = tmp_path / "repo"
    refindex.scan_to_icechunk(str(path), str(repo), group="files/a")
    summary = refindex.info(str(repo), group="files/a")
    assert summary["pages"]["object"].startswith("refindex-pages/")
    f = refindex.h5py_file(str(repo), group="files/a")
    with h5py.File(path, "r") as want:
        try:
            assert_same_h5(want, f)
            assert stats(f).from_pages > 0
        finally:
            f.close()
    _small_file(tmp_path / "small.h5")  # no bytes in its pages: the file is read whole when it opens
    refindex.scan_to_icechunk(str(tmp_path / "small.h5"), str(repo), group="files/small")
    f = refindex.h5py_file(str(repo), group="files/small")
    with h5py.File(tmp_path / "small.h5", "r") as want:
        try:
            assert assert_same_h5(want, f) == 5 and stats(f).from_source == 0
        finally:
            f.close()


# ---------------------------------------------------------------- remote
def test_a_pre_indexed_open_makes_no_request_beyond_the_index_and_its_freshness_check(site, nwb_files):
    folder, server, base = site
    start = len(server.requests)
    f = refindex.h5py_file(f"{base}/session.nwb.json")
    io, got = nwb_read(file=f)
    try:
        asked = server.requests[start:]
        index_gets = [r for r in asked if r[1] == "/session.nwb.json"]
        file_asks = [r for r in asked if r[1] == "/session.nwb"]
        assert len(index_gets) == 1 and len(file_asks) == 1, asked
        assert file_asks[0][2] is None or file_asks[0][0] == "HEAD", asked  # the freshness check, no bytes
        assert stats(f).from_source == 0 and stats(f).fetch.requests == 0
        hio, want = nwb_read(path=str(nwb_files["main"]))
        try:
            assert nwbcompare.assert_same_nwb(want, got) > 500  # data now comes by range requests
        finally:
            hio.close()
    finally:
        io.close()
        f.close()


def test_data_reads_fetch_the_next_chunks_ahead_concurrently(site):
    folder, server, base = site
    f = refindex.h5py_file(f"{base}/data.h5.json")
    try:
        with h5py.File(folder / "data.h5", "r") as want:
            expected = want["data"][()]
        start = len(server.requests)
        got = f["data"][()]
        np.testing.assert_array_equal(got, expected)
        chunk_gets = [r for r in server.requests[start:] if r[1] == "/data.h5" and r[0] == "GET"]
        s = stats(f)
        assert s.from_ahead == 40  # every chunk libhdf5 read was fetched ahead (or with the first)
        assert s.fetch.round_trips <= 6, s.as_dict()  # not one round trip per chunk
        assert len(chunk_gets) == s.fetch.requests
        np.testing.assert_array_equal(f["data"][1234:1240, 3], expected[1234:1240, 3])
    finally:
        f.close()


def test_reads_in_any_order_and_stride_are_the_files_bytes(site):
    """The read-ahead guesses the next chunks from the reads' steps; whatever the guess, each read
    must be the file's: strides over chunks, backwards, again, parts of chunks, scattered rows."""
    folder, server, base = site
    rng = np.random.default_rng(11)
    with h5py.File(folder / "data.h5", "r") as want_file, refindex.h5py_file(f"{base}/data.h5.json") as f:
        want, got = want_file["data"], f["data"]
        selections = [np.s_[50::250], np.s_[::300, 2], np.s_[3900:4000], np.s_[3900:4000], np.s_[10:20, 1:3]]
        selections += [np.s_[k * 100 + 7: k * 100 + 93] for k in range(39, -1, -3)]  # backwards, skipping
        selections += [np.sort(rng.choice(4000, 60, replace=False)), np.s_[:]]
        for sel in selections:
            np.testing.assert_array_equal(got[sel], want[sel], err_msg=str(sel))
        assert stats(f).from_ahead > 0


def test_chunks_above_a_part_read_as_the_file_does(tmp_path):
    """Chunks of 640 KB: the one libhdf5 waits for comes in parts side by side, each ahead alone."""
    rng = np.random.default_rng(12)
    path = tmp_path / "big_chunks.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=rng.integers(0, 1 << 30, (200_000, 8), dtype="i4"), chunks=(20_000, 8))
    with webserver.serve() as server:
        url = server.put("big_chunks.h5", path.read_bytes())
        with h5py.File(path, "r") as want, refindex.h5py_file(refindex.scan(url)) as f:
            first = want["x"].id.get_chunk_info(0)
            asked = len(server.requests)
            np.testing.assert_array_equal(f["x"][5:7], want["x"][5:7])
            starts = [int(r[6:].split("-")[0]) for m, _, r in server.requests[asked:] if m == "GET" and r]
            in_first = [a for a in starts if first.byte_offset <= a < first.byte_offset + first.size]
            assert len(in_first) == 3  # the chunk libhdf5 waits for, in three parts of up to 256 KiB
            for sel in (np.s_[:], np.s_[::40_000], np.s_[150_000:190_000, 3], np.s_[5:7]):
                np.testing.assert_array_equal(f["x"][sel], want["x"][sel], err_msg=str(sel))
            assert stats(f).from_ahead >= 9


def test_a_window_read_fetches_at_most_half_again_what_it_reads(tmp_path):
    """A window of 800 chunks in the middle of a long dataset: the read-ahead, which cannot see where the
    selection ends, fetches at most 1.5x the window's bytes (issue 44: 38 MB for 12.8 MB)."""
    path = tmp_path / "long.h5"
    rows = 256
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", (rows * 2400, 32), "i2", chunks=(rows, 32))  # 16 KiB chunks, in order
        for i in range(2400):
            d[i * rows:(i + 1) * rows] = i
    with webserver.serve() as server:
        url = server.put("long.h5", path.read_bytes())
        with refindex.h5py_file(refindex.scan(url), check_source=False) as f:
            before = stats(f).fetch.bytes_fetched
            got = f["x"][400 * rows:1200 * rows]
            fetched = stats(f).fetch.bytes_fetched - before
    np.testing.assert_array_equal(got[::rows, 0], np.arange(400, 1200))
    assert fetched <= 1.5 * got.nbytes, (fetched, got.nbytes)


def test_on_the_fly_the_file_opens_at_once_and_its_index_is_cached_beside(site, tmp_path):
    """The open reads the bytes the scan's prefetch fetched; the index, made by a child from them, is the
    one a scan makes, and the next open takes it from the cache."""
    folder, server, base = site
    cache = tmp_path / "cache"
    f = refindex.h5py_file(f"{base}/data.h5", cache=str(cache))
    try:
        with h5py.File(folder / "data.h5", "r") as want:
            assert_same_h5(want, f)
    finally:
        f.close()
    assert until(lambda: list(cache.glob("*.refs.json")), 60)  # written by a child
    [entry] = list(cache.glob("*.refs.json"))
    assert json.loads(entry.read_text()) == json.loads(json.dumps(refindex.scan(f"{base}/data.h5")))
    start = len(server.requests)
    f = refindex.h5py_file(f"{base}/data.h5", cache=str(tmp_path / "cache"))  # from the index cache
    try:
        assert f["group"].attrs["title"] == "a group"
        assert [r[0] for r in server.requests[start:]] == ["HEAD"] or len(server.requests[start:]) <= 1
    finally:
        f.close()


def test_a_changed_source_is_refused_before_any_page_is_served(site, tmp_path):
    folder, server, base = site
    (folder / "moving.h5").write_bytes((folder / "data.h5").read_bytes())
    refs = refindex.scan(f"{base}/moving.h5")  # as published: the freshness check needs its ETag alone
    with h5py.File(folder / "moving.h5", "a") as f:
        f["group"].attrs["title"] = "changed since it was indexed, to something longer"
        f.create_dataset("extra", data=np.arange(100))
    start = len(server.requests)
    with pytest.raises(refindex.StaleIndexError, match="source changed"):
        refindex.h5py_file(refs)
    assert all(r[2] is None for r in server.requests[start:]), "no byte of the file may be read"
    f = refindex.h5py_file(refs, check_source=False)  # on purpose: the caller's choice
    f.close()


def _small_file(path: Path, title: str = "small") -> None:
    """A file well under the size a reader fetches whole (``_pages.IN_FILE_MAX``): groups, attributes,
    a chunked and a contiguous dataset, a link and references."""
    with h5py.File(path, "w") as f:
        f.attrs["title"] = title
        g = f.create_group("group")
        g.attrs["unit"] = "volts"
        g.create_dataset("values", data=np.arange(200.0).reshape(20, 10), chunks=(5, 10), compression="gzip")
        f.create_dataset("labels", data=np.array(["a", "bb", "ccc"], dtype=h5py.string_dtype()))
        f["alias"] = h5py.SoftLink("/group/values")
        f.create_dataset("refs", data=[g.ref, f["labels"].ref], dtype=h5py.ref_dtype)


@pytest.mark.parametrize("form", ["json", "parquet"])
def test_a_small_file_is_fetched_whole_in_the_freshness_checks_round_trip(site, tmp_path, form):
    """A file of at most IN_FILE_MAX bytes: its index carries none of its bytes (as small as without
    pages), and an open reads the whole file beside the freshness check, side by side: no more round
    trips than carried pages, and every read after it from memory."""
    from refindex.scanner import _pages

    folder, server, base = site
    _small_file(folder / "small.h5")
    size = (folder / "small.h5").stat().st_size
    assert size <= _pages.IN_FILE_MAX
    if form == "json":
        refs = refindex.scan(f"{base}/small.h5")
        (folder / "small.h5.json").write_text(json.dumps(refs))
        target = f"{base}/small.h5.json"
        assert refs["refindex"]["pages"] == {"format": 1, "page_size": 1, "file_size": size, "bytes": 0,
                                             "in_file": True, "external_links": 0, "reads_elsewhere": []}
        without = refindex.scan(f"{base}/small.h5", pages=False)
        assert len(json.dumps(refs)) - len(json.dumps(without)) < 150  # the pages' few fields, no bytes
    else:
        target = str(tmp_path / "small.parq")
        refindex.scan_to_parquet(f"{base}/small.h5", target)
    assert refindex.info(target)["pages"]["in_file"] is True
    start = len(server.requests)
    f = refindex.h5py_file(target)
    try:
        asked = sorted(r for r in server.requests[start:] if r[1] == "/small.h5")
        assert asked == [("GET", "/small.h5", f"bytes=0-{size - 1}")], asked  # its answer's headers: the check
        with h5py.File(folder / "small.h5", "r") as want:
            assert assert_same_h5(want, f) == 5
        s = stats(f)
        assert s.reads > 0 and s.from_pages == s.reads and s.fetch.requests == 0
    finally:
        f.close()


def test_a_small_file_that_changed_is_refused_and_read_anew_when_asked(site):
    folder, server, base = site
    _small_file(folder / "small_moving.h5")
    refs = refindex.scan(f"{base}/small_moving.h5")
    indexed = (folder / "small_moving.h5").stat().st_mtime_ns
    _small_file(folder / "small_moving.h5", title="rewritten since it was indexed")
    os.utime(folder / "small_moving.h5", ns=(indexed + 10**9, indexed + 10**9))  # (a rewrite in the same clock tick
    #                                                                             would keep the validators)
    with pytest.raises(refindex.StaleIndexError, match="source changed"):
        refindex.h5py_file(refs)
    f = refindex.h5py_file(refs, check_source=False)  # the caller's choice: the file as it is now
    try:
        assert f.attrs["title"] == "rewritten since it was indexed"
        assert stats(f).fetch.requests == 1  # the whole file, once (no check read it)
    finally:
        f.close()
    with h5py.File(folder / "small_moving.h5", "a") as g:
        g.create_dataset("extra", data=np.arange(1000))  # now another size: libhdf5 says so, naming the file
    with pytest.raises(refindex.RefindexError, match="small_moving.h5.*truncated file"):
        refindex.h5py_file(refs, check_source=False)


def _released_once_asked(server: webserver.Server, name: str, seen: list[bool], source: webserver.Server,
                         wait: float = 10.0) -> None:
    """Pause ``name``'s body after 64 KiB until ``source`` has been asked a ``HEAD`` of anything (at most
    ``wait`` seconds); ``seen`` gets whether it was."""
    go, asked = threading.Event(), threading.Event()
    source.watched[("HEAD", None)] = asked
    server.paused[name] = (64 << 10, go)

    def watch() -> None:
        seen.append(asked.wait(wait))
        go.set()

    threading.Thread(target=watch, daemon=True).start()


def _large_index_file(path: Path) -> bytes:
    """A small HDF5 file whose index is large (variable-length strings, carried inline): its bytes."""
    _chunked_file(path)
    with h5py.File(path, "a") as f:
        rng = np.random.default_rng(7)
        f.create_dataset("names", data=[rng.bytes(12).hex() for _ in range(20000)], dtype=h5py.string_dtype())
    return path.read_bytes()


def test_a_large_index_has_its_source_asked_while_it_still_arrives(tmp_path):
    """The freshness check's round trip overlaps a large index's transfer: once the head of the index
    names its file, the file is asked for its validators (the check's one request, not asked again);
    a source changed since is still refused."""
    path = tmp_path / "big.h5"
    body = _large_index_file(path)
    with webserver.serve() as server:
        url = server.put("big.h5", body, mtime=1_700_000_000)
        text = json.dumps(refindex.scan(url))
        assert len(text) > (256 << 10) and text.startswith('{"version": 1, "templates": {"u": ')
        index_url = server.put("big.json", text.encode())
        start, seen = len(server.requests), []
        _released_once_asked(server, "big.json", seen, server)
        f = refindex.h5py_file(index_url)
        try:
            assert seen == [True]  # asked before the index had all arrived
            assert [r[:2] for r in server.requests[start:]] == [("GET", "/big.json"), ("HEAD", "/big.h5")]
            with h5py.File(path, "r") as want:
                assert_same_h5(want, f)
        finally:
            f.close()
        server.put("big.h5", body[:-1] + b"!", mtime=1_700_000_100)  # changed since it was indexed
        start = len(server.requests)
        with pytest.raises(refindex.StaleIndexError, match="source changed"):
            refindex.h5py_file(index_url)
        asked = [r[0] for r in server.requests[start:] if r[1] == "/big.h5"]
        assert asked.count("HEAD") == 1, asked  # (then the fingerprint's bytes: new validators alone prove nothing)


def test_a_source_the_url_policy_refuses_is_not_asked_early(tmp_path):
    """A remote index naming a file on another loopback host is refused before anything is asked
    of that host, early or not; allowed (``allowed_urls``), it is asked early as any source."""
    path = tmp_path / "big.h5"
    body = _large_index_file(path)
    try:
        other_host = webserver.serve(host="127.0.0.2")
        other = other_host.__enter__()
    except OSError as e:
        pytest.skip(f"this machine does not route 127.0.0.2 to the loopback interface ({e})")
    try:
        with webserver.serve() as server:
            elsewhere = other.put("big.h5", body)
            server.put("elsewhere.json", json.dumps(refindex.scan(elsewhere)).encode())
            asked_before, seen = len(other.requests), []
            _released_once_asked(server, "elsewhere.json", seen, other, wait=1.0)
            with pytest.raises(refindex.UntrustedReference):
                refindex.h5py_file(server.url("elsewhere.json"))
            assert seen == [False] and len(other.requests) == asked_before  # not asked early either
            start, seen = len(other.requests), []
            _released_once_asked(server, "elsewhere.json", seen, other)
            f = refindex.h5py_file(server.url("elsewhere.json"), allowed_urls=[other.base + "/"])
            try:
                assert seen == [True] and [r[:2] for r in other.requests[start:]] == [("HEAD", "/big.h5")]
                with h5py.File(path, "r") as want:
                    assert_same_h5(want, f)
            finally:
                f.close()
    finally:
        other_host.__exit__(None, None, None)


def test_a_small_files_check_is_one_request_settled_by_its_bytes_where_no_validator_comes(tmp_path):
    """A server that sends neither ETag nor Last-Modified: a small file's freshness check is one ranged
    GET of the whole file (no HEAD: its answer's Content-Range tells the size), settled by the
    fingerprint of the bytes it read: the file as indexed opens, a rewrite of the same size is refused."""
    _small_file(tmp_path / "a.h5", title="first version")
    _small_file(tmp_path / "b.h5", title="other version")
    a, b = (tmp_path / "a.h5").read_bytes(), (tmp_path / "b.h5").read_bytes()
    assert len(a) == len(b) and a != b
    with webserver.serve(etag=False, last_modified=False) as server:
        url = server.put("small.h5", a, mtime=1_700_000_000)
        refs = refindex.scan(url)
        assert refs["refindex"]["pages"]["in_file"] and "etag" not in refs["refindex"]["source"]
        server.requests.clear()
        f = refindex.h5py_file(refs)
        try:
            assert list(server.requests) == [("GET", "/small.h5", f"bytes=0-{len(a) - 1}")]
            with h5py.File(tmp_path / "a.h5", "r") as want:
                assert assert_same_h5(want, f) > 0
        finally:
            f.close()
        server.put("small.h5", b, mtime=1_700_000_000)
        with pytest.raises(refindex.StaleIndexError, match="source changed"):
            refindex.h5py_file(refs)


def test_in_file_pages_not_fetched_yet_serve_nothing(tmp_path):
    """Pages of a small file before its bytes came (no check read them) hold no bytes: a read goes to the
    file, never to an empty page."""
    from refindex.model import Pages
    from refindex.read.h5py_road import IndexedFile, PageMap
    from refindex.source import RangeFetcher

    path = tmp_path / "small.h5"
    _small_file(path)
    size = path.stat().st_size
    pages = Pages.kept_in_file(1, size, 0, [])
    assert PageMap(pages).get(0, 8) is None
    assert bytes(PageMap(pages.fetched(path.read_bytes())).get(0, 8)) == path.read_bytes()[:8]
    fh = IndexedFile(str(path), size, pages, RangeFetcher(str(path), {}))
    try:
        assert bytes(fh.read_range(0, 8)) == path.read_bytes()[:8] and fh.stats.from_source == 1
    finally:
        fh.close()


def test_a_small_file_opens_on_the_fly(site):
    """Its pages are the whole file, which its scan's first round trip fetched: the road takes those bytes
    (once the file was asked for again after its scan: one more round trip)."""
    folder, server, base = site
    _small_file(folder / "small_fly.h5")
    server.requests.clear()
    f = refindex.h5py_file(f"{base}/small_fly.h5", cache=False)
    try:
        asked = [(method, rng) for method, path, rng in server.requests if path == "/small_fly.h5"]
        assert len(asked) == 3 and sorted(m for m, _ in asked) == ["GET", "GET", "HEAD"], asked  # one round trip
        with h5py.File(folder / "small_fly.h5", "r") as want:
            assert_same_h5(want, f)
        assert len(server.requests) == 3 and f.refindex_file.stats.from_source == 0
    finally:
        f.close()


def test_h5py_file_over_s3(tmp_path, nwb_files):
    from conftest import moto_s3

    import fsspec

    with moto_s3() as so:
        fs = fsspec.filesystem("s3", **so)
        fs.mkdir("road")
        fs.put(str(nwb_files["hardlink"]), "road/session.nwb")
        f = refindex.h5py_file("s3://road/session.nwb", storage_options=so, cache=False)
        io, got = nwb_read(file=f)
        hio, want = nwb_read(path=str(nwb_files["hardlink"]))
        try:
            assert nwbcompare.assert_same_nwb(want, got) > 5
        finally:
            io.close()
            hio.close()
            f.close()
        _small_file(tmp_path / "small.h5")  # fetched whole beside the freshness check, through s3fs
        fs.put(str(tmp_path / "small.h5"), "road/small.h5")
        refs = refindex.scan("s3://road/small.h5", storage_options=so)
        assert refs["refindex"]["pages"].get("in_file")
        f = refindex.h5py_file(refs, remote_options=so)
        try:
            with h5py.File(tmp_path / "small.h5", "r") as want_small:
                assert assert_same_h5(want_small, f) == 5
            assert stats(f).fetch.requests == 0  # every read from the bytes the check brought
        finally:
            f.close()
        from refindex.source import RangeFetcher  # the read-ahead's batches, on s3fs's event loop

        data = fs.cat_file("road/session.nwb")
        ranges = [(0, 1000), (1500, 2000), (len(data) - 5000, len(data))]  # the first two share a request
        fetcher = RangeFetcher("s3://road/session.nwb", so)
        try:
            assert [bytes(x.result(timeout=30)) for x in fetcher.start_each(ranges)] == [data[a:b] for a, b in ranges]
            assert (fetcher.stats.round_trips, fetcher.stats.requests) == (1, 2)
        finally:
            fetcher.close()


# ---------------------------------------------------------------- garbage collection during an open
@contextmanager
def _counted_collections(note=lambda info: info["generation"]):
    """Every collection CPython runs inside, with a threshold of 1: any allocation of a container
    triggers one (an open of the session's index: hundreds, without the hold).  Yields the list of
    ``note(info)`` for each, where that is not None."""
    import gc

    seen: list = []

    def count(phase, info):
        if phase == "start" and (value := note(info)) is not None:
            seen.append(value)

    old = gc.get_threshold()
    gc.collect()
    gc.callbacks.append(count)
    gc.set_threshold(1)
    try:
        yield seen
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(count)


def _settled() -> None:
    """Collection back on: the holds of an earlier test's data reads are let go SETTLE seconds after
    their fetches complete (refindex.isolation.gcpause), so a test that looks at the holds waits for that first."""
    import gc

    from refindex.isolation import gcpause

    assert until(gc.isenabled, 10 + gcpause.SETTLE), "collection still held 10 s after the last test"


def test_an_open_holds_garbage_collection_and_gives_it_back(site, tmp_path):
    """An open allocates what lives as long as the file (modules, the index, its pages): the collections
    that would trigger free nothing and pushed a full one into pynwb's read after it (docs/h5py.md).
    It holds collection while it opens, turns it back on after, and leaves it off for a caller who
    turned it off; an open on the fly (its scan's prefetch, the chunk tables) runs with collection on."""
    import gc

    folder, server, base = site
    _settled()
    with _counted_collections() as seen:
        f = refindex.h5py_file(f"{base}/session.nwb.json")
        assert gc.isenabled()
        assert len(seen) < 20  # the few allocations entering and leaving the hold
    try:
        assert_same_h5(h5py.File(folder / "session.nwb", "r"), f)
    finally:
        f.close()
    _settled()  # the comparison's reads fetched chunks: their holds outlast them by gcpause.SETTLE
    with _counted_collections() as seen:
        f = refindex.h5py_file(f"{base}/data.h5", cache=False)  # on the fly: its garbage collected
        assert gc.isenabled()
        assert len(seen) > 100
        f.close()
    gc.disable()
    try:
        refindex.h5py_file(f"{base}/session.nwb.json").close()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_what_an_open_made_joins_the_oldest_generation(site):
    """CPython counts what survives its young collections toward the next full one: an open's objects,
    which live as long as the file, brought a full collection (55-75 ms) into pynwb's read after it.
    They leave the open in the oldest generation, without a collection counted for them; objects the
    caller froze stay frozen (the open then leaves its objects as they are: this suite is such a caller)."""
    import gc

    folder, server, base = site
    _settled()

    def oldest() -> set[int]:
        return {id(o) for o in gc.get_objects(generation=2)}

    gc.unfreeze()  # what the suite froze (conftest), frozen again below
    try:
        f = refindex.h5py_file(f"{base}/session.nwb.json")
        try:
            made = [f.refindex_file, f.refindex_file.__dict__, f.refindex_file.pages]
            assert all(gc.is_tracked(o) for o in made)
            assert {id(o) for o in made} <= oldest()
            assert gc.get_count()[1:] == (0, 0)  # no young collection counted since
        finally:
            f.close()
        mine = [[i] for i in range(5000)]
        gc.freeze()
        frozen = gc.get_freeze_count()
        f = refindex.h5py_file(f"{base}/session.nwb.json")
        try:
            assert gc.get_freeze_count() > frozen - 1000  # (a few frozen objects freed by reference counting)
            assert not {id(o) for o in mine} & oldest()  # still frozen, not moved
            assert id(f.refindex_file) not in oldest()
        finally:
            f.close()
    finally:
        gc.freeze()


FETCHING_THREADS = ("refindex-http", "refindex-fetch", "fsspecIO", "asyncio")  # what fetches for libhdf5


def test_no_collection_runs_in_a_fetching_thread_while_libhdf5_waits(site):
    """libhdf5 calls the file object with h5py's lock held; a collection that starts in a thread
    fetching for it and finds an h5py object among the garbage waits for that lock, and both wait for
    ever (h5py issue 2019).  With a threshold of 1 any allocation may start one: none may run in
    refindex's HTTP threads or fsspec's loop while the lock is held, during a remote scan or the road's
    data reads (chunks read ahead among them)."""
    from h5py._objects import phil

    folder, server, base = site

    def locked_elsewhere(info):  # the fetching thread a collection starts in, while another holds h5py's lock
        name = threading.current_thread().name
        if not name.startswith(FETCHING_THREADS):
            return None  # the loopback server's threads stand for a remote server; timers let holds go
        if phil.acquire(False):
            phil.release()
            return None
        return name

    refindex.scan(f"{base}/data.h5")  # modules imported before the threshold drops
    with _counted_collections(locked_elsewhere) as threads:
        refs = refindex.scan(f"{base}/data.h5", fetch=refindex.FetchOptions(block_size=4096, first_read=4096,
                                                                              prefetch_metadata=False))
        with refindex.h5py_file(refs) as f, h5py.File(folder / "data.h5", "r") as want:
            np.testing.assert_array_equal(f["data"][:], want["data"][:])
            assert stats(f).fetch.requests > 0
    assert sorted(set(threads)) == []


def test_a_chunk_index_too_large_to_carry_is_fetched_in_one_round_trip(tmp_path):
    """A dataset of 2,000 chunks: its B-tree's nodes (over INDEX_MAX) stay in the file, the pages say where
    they lie; the first read of one of its chunks fetches every node at once, and in the same round trip
    the chunks the h5py read in progress needs (issue 44: those came a round trip later)."""
    from concurrent.futures import Future

    from refindex.scanner._pages import INDEX_MAX

    rng = np.random.default_rng(7)
    with h5py.File(tmp_path / "big.h5", "w") as f:
        f.create_dataset("x", data=rng.integers(0, 99, (20000, 64), dtype="i4"), chunks=(10, 64))  # 5 MB
    with webserver.serve(folder=tmp_path) as server:
        refs = index(f"{server.base}/big.h5")
        ranges = refs["refindex"]["pages"]["index_ranges"]
        assert "/x" in ranges
        with refindex.h5py_file(refs) as f, h5py.File(tmp_path / "big.h5", "r") as want:
            before = stats(f).fetch.round_trips
            np.testing.assert_array_equal(f["x"][10005:10010], want["x"][10005:10010])
            waiting = [fut for _, fut, _, _ in f.refindex_file.ahead.buffers.values()]  # chunks fetched ahead
            waiting += [d for _, _, d in f.refindex_file._fetched if isinstance(d, Future)]  # nodes not read
            for fut in waiting:
                fut.exception(timeout=30)  # (a round trip counts once its last request is in: waited for, not raced)
            # every node and the chunk at once: not a round trip per level of the tree, as libhdf5 reads it,
            # nor the chunk after the nodes
            assert stats(f).fetch.round_trips - before == 1
            assert stats(f).from_ahead == 1  # the chunk came with the nodes
            np.testing.assert_array_equal(f["x"][:], want["x"][:])
    from refindex.formats import pages_of_document

    starts, ends = pages_of_document(refs["refindex"]["pages"], inline=None).index_ranges["/x"]
    assert int((ends - starts).sum()) > INDEX_MAX


def _holds_let_go() -> bool:
    """Whether collection is on once the timers that let go of finished fetches' holds (gcpause.SETTLE
    seconds after each) have run: they are started as a fetch completes, so joining them is waiting
    for every hold a completed fetch let go."""
    import gc

    from refindex.isolation import gcpause

    for timer in threading.enumerate():
        if isinstance(timer, threading.Timer) and getattr(timer.function, "__module__", "") == gcpause.__name__:
            timer.join(10 + gcpause.SETTLE)
    return gc.isenabled()


def test_a_fetch_of_one_future_per_range_holds_collection_until_its_last_range():
    import gc
    from concurrent.futures import Future

    from refindex.isolation.gcpause import held_while_fetching

    assert until(_holds_let_go)  # what an earlier test of this process fetched has let go
    futures: list[Future] = [Future(), Future()]
    assert held_while_fetching(lambda: futures) is futures
    futures[0].set_result(b"")
    assert not _holds_let_go()  # one range is still on its way
    futures[1].set_result(b"")
    assert _holds_let_go()
    assert held_while_fetching(lambda: []) == [] and _holds_let_go()  # nothing to wait for: nothing held


def test_a_forked_child_does_not_inherit_the_holds_of_fetching_threads():
    """A fetch in flight holds collection in the parent; a child forked meanwhile (Dask, multiprocessing)
    has none of those threads, so nothing would ever let it go: collection is on in the child."""
    import gc
    from concurrent.futures import Future

    from refindex.isolation.gcpause import held_while_fetching

    pending: Future = Future()
    held_while_fetching(lambda: pending)
    try:
        assert not gc.isenabled()
        pid = os.fork()
        if pid == 0:
            os._exit(0 if gc.isenabled() else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        pending.set_result([])
    assert _holds_let_go()


def test_a_file_left_open_until_the_interpreter_ends_does_not_crash_it(tmp_path):
    """libhdf5 closes files still open from its own exit handler, after the interpreter is gone, and h5py's
    file-object driver then calls into it: a road file kept until then (here by a class attribute of a
    module freed last) crashed the process at exit (SIGSEGV).  The road closes its files at exit."""
    path = tmp_path / "kept.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(100)
    refindex.scan_to_file(str(path), str(tmp_path / "kept.json"))
    code = ("import refindex\nfrom refindex.model import Pages\n"
            f"f = refindex.h5py_file({str(tmp_path / 'kept.json')!r})\nPages.kept = f\nprint(int(f['x'][-1]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "99"), done.stderr[-2000:]
