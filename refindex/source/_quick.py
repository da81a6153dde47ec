"""Which filesystem reaches a URL: refindex's own HTTP requests where they serve, else fsspec's.

Kept apart from :mod:`._open` (the block cache, the prefetch) so that fetching an index
needs only this and :mod:`._http`: an open can start its request before it imports the rest.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from .. import urls
from ..errors import SourceError
from ._http import QuickHTTP, honours


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
