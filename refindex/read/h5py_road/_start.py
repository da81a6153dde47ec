"""``refindex.h5py_file``'s first steps: the index's request goes out before the modules that read it load.

Opening a published index is two round trips (the index, the freshness check of its file)
and refindex's own imports (~25 ms: the source layer, the road's file object, the pages'
decoder).  This module imports almost nothing, so a JSON index at an HTTP(S) URL is
requested first, in a thread (:func:`fetch_early`), and those imports run while its answer
travels; the rest of the open (:mod:`._open`) takes the bytes from there.  An HDF5 file at
an HTTP(S) URL with no index in the cache is scanned on the fly: the scan's first round trip
(the file's size and validators, its head and tail) goes out the same way
(:func:`scan_early`), while the scanner's modules load (~40 ms more).  ``refindex.open_nwb``
starts the same way (:func:`requested_early`), whichever road it then takes.  The freshness
check's request leaves as soon as a large index's first bytes name its file (:class:`_AskedEarly`),
while the rest of the index travels.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ... import urls
from ...isolation.gcpause import held_for_open
from ..index._names import CacheSetting, IndexCache, kind_by_name

ASK_EARLY_FROM = 256 << 10  # an index at least this long has its source asked before it has all arrived
# the head of a JSON index refindex wrote: its first template is the HDF5 file it describes
TEMPLATE_FIRST = re.compile(rb'\{\s*"version"\s*:\s*1\s*,\s*"templates"\s*:\s*\{\s*"u"\s*:\s*("(?:[^"\\]|\\.)*")')


def h5py_file(target: Any, *, storage_options: dict[str, Any] | None = None,
              remote_options: dict[str, Any] | None = None, check_source: bool = True, cache: CacheSetting = True,
              allowed_urls: Sequence[str] | None = None, trust: bool = False, group: str | None = None,
              branch: str | None = None, snapshot: str | None = None) -> Any:
    """A read-only ``h5py.File`` of the HDF5 file an index describes, opened from the index's pages.

    ``target``: an index (dict, JSON path/URL, parquet folder, Icechunk repository with
    ``group``/``branch``/``snapshot``) or the HDF5 file itself (local path or URL: scanned
    on the fly, or found in the local index ``cache``, as :func:`refindex.open_nwb` does: a URL
    opens from the bytes the scan's first round trips fetch, its index made beside for the cache).
    libhdf5 reads the metadata the index carries (its pages: no request); other bytes come
    by range requests from the file, through refindex's source layer (retries, a block cache
    for small reads, the chunks libhdf5 will ask for next fetched ahead, concurrently).

    It is a real ``h5py.File`` (h5py's file-object driver): unchanged h5py code, pynwb's
    ``NWBHDF5IO(file=...)``, nwbinspector or dandi-cli read it as they read any file.  The
    index is checked against its source (``check_source``) before any page is served.
    ``storage_options`` reach the index (or the HDF5 file given directly),
    ``remote_options`` the file an index describes (default: ``storage_options``); the
    other keywords are those of :func:`refindex.open`.  An index without pages (made with
    ``pages=False`` or by another tool) still works: every metadata read is then a request.
    External links cannot be followed through h5py's file-object driver: a file that has
    some opens with a :class:`~refindex.RefindexWarning`, and following one fails loudly.
    """
    # what an open allocates lives as long as the file (refindex.isolation.gcpause)
    asked = SourceAsk(remote_options, allowed_urls, trust) if check_source else None
    with held_for_open(), requested_early(target, storage_options, cache := IndexCache.of(cache), asked) as fetched:
        # (the index cache resolved once, inside the hold: every step below is handed the same folder)
        from ._open import Road, open_road, prepared

        if fetched is None and uncached_remote_hdf5(target, cache):
            from ._beside import on_the_fly

            made = on_the_fly(target, storage_options=storage_options, remote_options=remote_options,
                              cache=cache)  # (an index made here from the file named: trusted, fresh)
            return open_road(made if isinstance(made, Road) else made.road())

        return open_road(prepared(target, storage_options=storage_options, remote_options=remote_options,
                                  check_source=check_source, cache=cache, allowed_urls=allowed_urls, trust=trust,
                                  group=group, branch=branch, snapshot=snapshot, fetched=fetched).road())


@dataclass(frozen=True)
class SourceAsk:
    """How the freshness check of an index will ask its source (the open's ``remote_options``, and
    the policy its URLs are judged by): what lets :func:`requested_early` ask it early."""

    remote_options: dict[str, Any] | None = None
    allowed_urls: Sequence[str] | str | None = None
    trust: bool = False


@contextmanager
def requested_early(target: Any, storage_options: dict[str, Any] | None, cache: CacheSetting,
                    source: SourceAsk | None = None) -> Iterator[Future | None]:
    """An open's first request, sent now (:func:`fetch_early`, else :func:`scan_early`): yields a JSON
    index's bytes to come (``fetched`` for :func:`~refindex.read.load_refs`) or None; a scan's round
    trip that no scan took is dropped on the way out.  ``source`` (None: the source is not checked):
    a large index's source is asked for its size and validators as soon as the index's first bytes
    name it (:class:`_AskedEarly`), so the freshness check's round trip overlaps the index's transfer."""
    asked = _AskedEarly(target, source) if source is not None else None
    fetched = fetch_early(target, storage_options, asked.peek if asked is not None else None)
    drop = scan_early(target, storage_options, cache) if fetched is None else None
    try:
        yield fetched
    finally:
        if drop is not None:
            drop()
        if asked is not None:
            asked.drop()


def fetch_early(target: Any, storage_options: dict[str, Any] | None,
                peek: Callable[[bytes, int | None], None] | None = None) -> Future | None:
    """The bytes of a JSON index named by an HTTP(S) URL (``.json``), requested now in a thread, as
    :func:`~refindex.read.load_refs` would request them (refindex's own HTTP client, retries);
    None for anything else, which is read as before.  ``peek``: see
    :meth:`~refindex.source.QuickHTTP.cat_file_peeked`."""
    if not isinstance(target, str) or kind_by_name(target) != "json":
        return None
    from ...source import honours, quick_filesystem, retried_in_thread  # _quick, _http and _retry only

    if not honours(target, storage_options):  # not HTTP(S), or options only fsspec honours: read as before
        return None
    fs, path = quick_filesystem(target, storage_options)
    if peek is None:
        return retried_in_thread("refindex-index", fs.cat_file, path)
    return retried_in_thread("refindex-index", fs.cat_file_peeked, path, peek)


class _AskedEarly:
    """The source of a large JSON index, asked for its ``info`` as soon as the index's head names it.

    refindex writes ``{"version": 1, "templates": {"u": <the HDF5 file>}, ...`` first, so the
    file is known once 16 KiB of the index have arrived; its ``info`` (the freshness check's
    request) is then asked with :func:`~refindex.source.request_ahead`, which the check takes
    instead of asking again.  Only for an index of at least :data:`ASK_EARLY_FROM` bytes: a small
    index arrives at once, and a small file's check reads the whole file instead (one request).
    The URL is judged by the policy the index's URLs will be judged by before it is asked; what no
    check took is dropped when the open ends (never used by a later open)."""

    def __init__(self, target: Any, source: SourceAsk):
        self.target = target
        self.source = source
        self.drops: list[Callable[[], None]] = []
        self.done = False
        self.lock = threading.Lock()

    def peek(self, head: bytes, length: int | None) -> None:
        found = TEMPLATE_FIRST.match(head)
        if self.done or length is None or length < ASK_EARLY_FROM or found is None:
            return
        url = urls.normalise(json.loads(found.group(1)))
        from ..index._urlpolicy import UrlPolicy, allowed_patterns

        policy = UrlPolicy(self.target, allowed=allowed_patterns(self.source.allowed_urls), trust=self.source.trust)
        if policy.refusal(url) is not None:
            return  # refused later, with its reason, when the index's URLs are judged
        from ...source import request_ahead

        with self.lock:
            if not self.done:
                drop = request_ahead(url, self.source.remote_options, ())
                if drop is not None:
                    self.drops.append(drop)

    def drop(self) -> None:
        with self.lock:
            self.done = True
            drops, self.drops = self.drops, []
        for drop in drops:
            drop()


def uncached_remote_hdf5(target: Any, cache: CacheSetting) -> bool:
    """Is ``target`` an HDF5 file at a URL (by its name: ``.nwb``, ``.h5``...) whose index the cache
    does not hold?  (Then it is scanned on the fly, :func:`~refindex.read.h5py_road.on_the_fly`.)"""
    if not isinstance(target, str) or kind_by_name(target) != "hdf5" or urls.is_local(target):
        return False
    return not IndexCache.of(cache).holds(target)


def scan_early(target: Any, storage_options: dict[str, Any] | None, cache: CacheSetting) -> Callable[[], None] | None:
    """For an HDF5 file named by an HTTP(S) URL (``.nwb``, ``.h5``...) that the index cache does
    not hold: the first round trip of its scan on the fly, asked for now
    (:func:`~refindex.source.request_ahead`); a function that drops it if no scan takes it.
    None for anything else (a cached index is checked for freshness instead: nothing to ask)."""
    if not uncached_remote_hdf5(target, cache):
        return None
    from ...options import FetchOptions
    from ...source import request_ahead  # _quick, _http and _retry only

    return request_ahead(urls.normalise(target), storage_options, FetchOptions().end_spans())  # as scans ask
