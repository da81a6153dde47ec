"""Which filesystem reaches a URL: refindex's own HTTP requests where they serve, else fsspec's.

Kept apart from :mod:`._open` (the block cache, the prefetch) so that fetching an index
needs only this and :mod:`._http`: an open can start its request before it imports the rest
(an index's, or with :func:`request_ahead` the first round trip of a scan on the fly).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from .. import urls
from ..errors import SourceError
from ._http import QuickHTTP, honours
from ._retry import with_retries


def filesystem_of(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """(filesystem, path) of ``url``; a failure to make the filesystem is a SourceError naming it."""
    try:
        return urls.filesystem(url, storage_options)
    except Exception as e:
        raise SourceError(f"cannot open filesystem for {urls.split(url)[0]}://: {e}", file=url) from e


_QUICK: dict[str, QuickHTTP] = {}
_QUICK_LOCK = threading.Lock()


def quick_filesystem(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """(filesystem, path) for ``url``, with refindex's own HTTP requests where they serve: a
    :class:`~refindex.source.QuickHTTP` for an HTTP(S) URL whose storage options it honours (one
    per set of options, so its connections are reused), else :func:`filesystem_of`."""
    if not honours(url, storage_options):
        return filesystem_of(url, storage_options)
    key = json.dumps(storage_options or {}, sort_keys=True, default=repr)
    with _QUICK_LOCK:
        fs = _QUICK.get(key)
        if fs is None:
            fs = _QUICK[key] = QuickHTTP((storage_options or {}).get("headers"), options=storage_options)
    return fs, url


# Filesystems whose whole-file read asks the object's size first (s3fs: to split a large object across
# connections); a read from offset 0 is one request without that round trip.
SIZE_PROBING_PROTOCOLS = frozenset({"s3", "s3a"})


def read_whole(fs: Any, path: str) -> bytes:
    """The whole file in one request, retried (an index of kilobytes needs no size probe before it)."""
    protocols = getattr(fs, "protocol", ())
    protocols = {protocols} if isinstance(protocols, str) else set(protocols)
    if protocols & SIZE_PROBING_PROTOCOLS:
        return with_retries(fs.cat_file, path, start=0)
    return with_retries(fs.cat_file, path)


def in_thread(name: str, call: Callable[..., Any], *args: Any) -> Future:
    """``call(*args)`` started now in a thread of its own: its result or its error (raised by
    whoever takes it, as the call would have raised)."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(call(*args))
        except BaseException as e:  # noqa: BLE001 - raised by the taker
            future.set_exception(e)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def retried_in_thread(name: str, call: Callable[..., Any], *args: Any) -> Future:
    """:func:`in_thread` of ``call(*args)`` with retries."""
    return in_thread(name, with_retries, call, *args)


_AHEAD: dict[tuple[Any, str, tuple], Future] = {}
_AHEAD_LOCK = threading.Lock()


def request_ahead(url: str, storage_options: dict[str, Any] | None,
                  spans: Sequence[tuple[int, int | None]]) -> Callable[[], None] | None:
    """Ask now, in a thread, for the first round trip a scan of ``url`` makes (its ``info`` and
    ``spans``, see :func:`~refindex.source.info_and_ends`), which that scan then takes instead
    of asking again: an open on the fly sends it before it loads the scanner's modules (~40 ms).

    Returns a function that drops it if no scan took it (an index found in the cache instead);
    None where refindex's own HTTP requests do not reach ``url`` (nothing asked)."""
    if not honours(url, storage_options):
        return None
    fs, path = quick_filesystem(url, storage_options)
    key = (fs, path, tuple(spans))
    # (no hold on collection, refindex.isolation.gcpause: it is taken before libhdf5 opens the file, and
    # nothing libhdf5 waits for later is fetched by it)
    return put_ahead(key, retried_in_thread("refindex-ahead", fs.info_and_ranges, path, list(spans)))


def put_ahead(key: tuple[Any, str, tuple], future: Future) -> Callable[[], None]:
    """Keep ``future`` (a first round trip asked ahead) for the scan of ``key`` = (fs, path, spans)
    to take (:func:`taken_ahead`); returns the function that drops it if none did."""
    with _AHEAD_LOCK:
        _AHEAD[key] = future

    def drop() -> None:
        with _AHEAD_LOCK:
            _AHEAD.pop(key, None)

    return drop


def taken_ahead(fs: Any, path: str, spans: Sequence[tuple[int, int | None]]) -> Future | None:
    """The round trip :func:`request_ahead` started for ``path`` on ``fs`` with ``spans`` (taken once), or None."""
    with _AHEAD_LOCK:
        return _AHEAD.pop((fs, path, tuple(spans)), None)
