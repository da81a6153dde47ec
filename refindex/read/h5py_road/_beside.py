"""The h5py road on the fly without waiting for a scan: libhdf5 reads the bytes the scan's first round
trips fetched, and the index, when the cache wants one, is made beside.

A remote file of many small objects (an NWB file of hundreds of series) no larger than
``FetchOptions.whole_file_max`` is fetched whole by its scan's first round trips (its
metadata is scattered over all of it), and libhdf5 then spends most of the scan in
per-object calls: on P4's many-object file 0.6 s of walk (shared with a helper process)
after 0.35-0.45 s of fetching.  The h5py road does not need an index to read such a file,
since every byte of it is in memory already: :func:`whole_road` serves libhdf5 from those
bytes at once (``h5py_file``, and ``open_nwb`` on the h5py road).  What the road must know
before it hands the file out, and which the walk used to tell it, the scan's prefetch saw on
its way through the tree (``Source.seen``): links into other files and virtual datasets whose
sources are other files, which h5py's file-object driver cannot open.

The index is wanted only for the local cache (so that the next open is two requests, not a
scan).  It is made by a forked child the open never waits for, as the split walk's helper
is (:mod:`refindex.scanner._split`): the child reads only the bytes in memory (a fork
cannot fetch: the cache refuses), writes the cache entry atomically and ends; it ends after
:data:`CHILD_SECONDS` and when this process ends (not with the thread that opened, which may be
a worker that ends at once), and nothing the caller reads depends on it: when it fails, dies
or is not done before the process ends, the cache stays empty and the next open scans.  A
process that ends normally (a short script: open, read, exit) waits for its children at exit,
up to :data:`EXIT_WAIT` seconds, so that their entries are written (:func:`wait_for_indexes`).
With ``cache=False`` there is no child at all.

A larger file is not waited for either (:func:`light_road`): libhdf5 needs of a scan only the
chunk tables (the rest, every attribute, values copied in, the index's JSON, is the cache's); it
reads the bytes the prefetch brought, and the tables steer its reads ahead.  The index is made
beside the same way, from the bytes in memory; a file whose scan needs more (values far from
any metadata) is remembered (:func:`scan_here`) and scanned in the process at its next open.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ... import urls
from ...isolation.gcpause import collections_allowed
from ...isolation.lifetime import exit_with_process, process_pipe, silenced
from ...model import Pages
from ...options import ScanOptions
from ...pipeline import OpenedScan, opened_for_scan
from ...scanner import chunk_runs
from ...source import held_bytes
from ..index._load import keep_in_cache
from ..index._names import CacheSetting, IndexCache
from ._open import Prepared, Road, prepared

MIN_OBJECTS = 256  # fewer objects: the walk is short, so the scan runs here as before (and is cached)
CHILD_SECONDS = 300  # the child making the index ends after this long, done or not
# Seconds a process ending normally waits, at most, for the children still making its indexes: what
# the next run would spend scanning again, bounded (a child takes a fraction of a second on a small
# file; nice 10, it takes longer on a machine busy with other work)
EXIT_WAIT = 30.0
_MAKING: dict[int, tuple[int, threading.Event]] = {}  # child pid -> (the process that forked it, set when it ended)


def on_the_fly(url: str, *, storage_options: dict[str, Any] | None, remote_options: dict[str, Any] | None,
               cache: CacheSetting, accept: Callable[[Any], None] | None = None,
               accept_file: Callable[[Any], None] | None = None, links_out: bool = True) -> Road | Prepared:
    """An HDF5 file at a URL whose index the cache does not hold, for the h5py road: the road over the
    bytes its scan's prefetch fetched (:func:`whole_road` when that is all of it, else
    :func:`light_road`), its index made beside for the cache; or, where neither can be taken, scanned
    now, its index kept in the cache (as :func:`~refindex.read.index_of_file` does) and prepared
    (fresh: no check).  ``accept(index)`` / ``accept_file(h5py file)`` may refuse the file before
    anything is cached (``open_nwb``: not an NWB file); ``links_out=False``: a file linking into other
    files is indexed here (``open_nwb``'s "auto" reads it through the zarr road, which needs the index)."""
    options = ScanOptions().but(storage_options=dict(storage_options or {}))
    cache = IndexCache.of(cache)
    where = urls.normalise(url)
    entry = cache.entry(where, options)
    so = dict(remote_options if remote_options is not None else storage_options or {})
    with collections_allowed():  # a scan makes garbage (refindex.isolation.gcpause)
        with opened_for_scan(where, options) as opened:
            road = whole_road(opened, entry, so, accept_file, links_out)
            if road is None:
                road = light_road(opened, entry, so, accept_file, links_out)
            refs = opened.refs(progress="auto") if road is None else None  # a bar in a notebook when it takes seconds
    if road is not None:
        return road
    if accept is not None:
        accept(refs)
    if entry is not None:
        keep_in_cache(refs, entry)
        forget_scan_here(entry)
    prep = prepared(refs, storage_options=storage_options, remote_options=so, check_source=False, cache=cache,
                    allowed_urls=None, trust=True, group=None, branch=None, snapshot=None)
    raw = opened.src.cache
    if isinstance(prep.pages_doc, dict) and prep.pages_doc.get("in_file") and raw is not None and raw.holds_everything:
        prep.held = raw.everything()  # pages that are the whole file: the bytes the scan holds, not fetched again
    return prep


def whole_road(opened: OpenedScan, entry: Path | None, options: dict[str, Any],
               accept_file: Callable[[Any], None] | None = None, links_out: bool = True) -> Road | None:
    """The road over the bytes of ``opened`` when its scan fetched all of the file and it has at least
    :data:`MIN_OBJECTS` objects (its index made beside into ``entry``, when given and a fork can make
    it); None when the scan should run here as before.  ``options``: storage options to reach the file;
    ``accept_file``, ``links_out``: see :func:`on_the_fly`."""
    src, seen = opened.src, opened.src.seen
    raw = src.cache
    if raw is None or not seen.complete or seen.objects < MIN_OBJECTS or not raw.holds_everything:
        return None
    if entry is not None and not can_index_beside():
        return None  # the scan runs here, so that its index is cached
    if seen.external_links and not links_out:
        return None
    if accept_file is not None:
        accept_file(src.h5)
    pages = Pages.kept_in_file(opened.options.page_size, src.size, seen.external_links,
                               sorted(seen.reads_elsewhere)).fetched(raw.everything())
    if entry is not None:
        index_beside(opened, entry)
    return Road(src.url, src.size, pages, None, options)


def light_road(opened: OpenedScan, entry: Path | None, options: dict[str, Any],
               accept_file: Callable[[Any], None] | None = None, links_out: bool = True) -> Road | None:
    """The road over the bytes the scan's prefetch fetched and the file's chunk tables: what libhdf5
    needs of a scan (see :mod:`refindex.scanner._tables`).  The index, when ``entry`` wants one, is made
    by a forked child from the bytes in memory, as :func:`whole_road`'s; a child that needed bytes it
    did not hold leaves :func:`scan_here` behind, and the next open scans in this process.  None when
    the prefetch did not see the whole tree (what h5py's file-object driver cannot follow would be
    unknown), or an index is wanted that no child can make: the scan runs as before.  ``options``,
    ``accept_file``, ``links_out``: see :func:`whole_road`."""
    src, seen, raw = opened.src, opened.src.seen, opened.src.cache
    if raw is None or not seen.complete or (seen.external_links and not links_out):
        return None
    if entry is not None and (not can_index_beside() or scan_here(entry).exists()):
        return None  # the scan runs here, so that its index is cached
    if accept_file is not None:
        accept_file(src.h5)
    if entry is not None:
        index_beside(opened, entry)  # before the tables are listed: the child's pages are what a scan reads
    runs = chunk_runs(src.h5, raw.read_ranges, src.size)
    starts, ends, data = held_bytes(raw)
    extents = {path: (int(offsets.min()), int((offsets + sizes).max())) for path, (offsets, sizes) in runs.items()}
    pages = Pages(opened.options.page_size, src.size, np.asarray(starts, np.int64), np.asarray(ends, np.int64), data,
                  extents=extents, external_links=seen.external_links, reads_elsewhere=sorted(seen.reads_elsewhere))
    return Road(src.url, src.size, pages, runs.get, options)


def scan_here(entry: Path) -> Path:
    """Left beside a cache entry by a child that could not make it from the bytes in memory: the next
    open of that file scans in its process (and removes it once the entry is written)."""
    return entry.with_name(entry.name + ".scan-here")


def remember_scan_here(entry: Path) -> None:
    """Leave :func:`scan_here` for ``entry`` (a cache that cannot take it is left as it is)."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        scan_here(entry).touch()
    except OSError:
        pass


def forget_scan_here(entry: Path) -> None:
    """Remove :func:`scan_here` for ``entry`` once it was scanned here (a cache that cannot take the change,
    made read-only since, is left as it is: the open has its index, and the next one scans again)."""
    try:
        scan_here(entry).unlink(missing_ok=True)
    except OSError:
        pass


def can_index_beside() -> bool:
    """Can this process fork the child that makes an index beside an open?  (Linux: elsewhere a fork
    without exec is less safe, macOS, or absent, Windows.)"""
    return hasattr(os, "fork") and sys.platform.startswith("linux")


def index_beside(opened: OpenedScan, entry: Path) -> int | None:
    """Fork the child that makes the index of ``opened`` and keeps it in ``entry``; its pid (None when
    no child could be made).  The child is reaped by a thread of this process, never waited for."""
    try:
        opened.src.serves_ranges()  # asked here when its answers did not tell (the child cannot fetch)
    except Exception:  # noqa: BLE001 - the server would not say: no index beside (the next open scans)
        return None
    try:
        pipe = process_pipe()
    except OSError:  # no file descriptors left
        return None
    try:
        pid = os.fork()
    except OSError:  # no memory for a copy, too many processes
        os.close(pipe[0])
        os.close(pipe[1])
        return None
    if pid == 0:  # the child: whatever happens, it ends here, never back in the caller's code
        code = 1
        try:
            exit_with_process(pipe)  # (with this process: the thread that called may end at once)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # not a handler of the caller's
            signal.alarm(CHILD_SECONDS)
            os.nice(10)  # the caller's reads first: it is reading the file this child indexes
            silenced(1, 2)
            mine = OpenedScan(opened.src, opened.options.but(split_walk=False), opened.recorder)
            refs = None
            try:
                with collections_allowed():  # a scan makes garbage
                    refs = mine.refs()
            except Exception:  # noqa: BLE001 - nothing is cached
                pass
            if getattr(opened.src.cache, "refused_in_fork", False):
                remember_scan_here(entry)  # even a scan that absorbed the refusal: its index is not a scan's
            elif refs is not None:
                keep_in_cache(refs, entry)
                code = 0
        finally:
            os._exit(code)
    os.close(pipe[0])
    ended = threading.Event()
    _MAKING[pid] = (os.getpid(), ended)
    threading.Thread(target=_reap, args=(pid, pipe[1], ended), name="refindex-index-beside", daemon=True).start()
    return pid


def _reap(pid: int, pipe_end: int, ended: threading.Event) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:  # reaped elsewhere (a caller's SIGCHLD handler)
        pass
    os.close(pipe_end)
    _MAKING.pop(pid, None)
    ended.set()


@atexit.register
def wait_for_indexes(seconds: float | None = None) -> None:
    """At the normal end of a process: wait for the children still making its cache entries, up to
    ``seconds`` (:data:`EXIT_WAIT`) in all.  A short script ends before its child is done, and the child
    ends with it (:func:`~refindex.isolation.lifetime.exit_with_process`): its entry would never be written.
    (A process forked from this one does not wait for its parent's children.)"""
    deadline = time.monotonic() + (EXIT_WAIT if seconds is None else seconds)
    for owner, ended in list(_MAKING.values()):
        try:
            if owner == os.getpid():
                ended.wait(max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:  # asked to stop: the entries are left unwritten
            return
