"""Many byte ranges of one file fetched side by side, with little work per request.

A level of a big chunk index is thousands of small ranges (B-tree nodes 0.5 MB apart), so
what a request costs in Python decides the time.  fsspec's ``cat_ranges`` wraps every
request in a task, a ``wait_for`` and a turn of ``asyncio.wait`` over up to 1,280 pending
tasks (~130 us each here); :func:`cat_parts` runs the async filesystem's own ``_cat_file``
(http, s3, gcs) from ``limit`` worker coroutines on fsspec's event loop instead: each
worker takes the next range when its last one is done.  Filesystems without an async
implementation keep their ``cat_ranges``.
"""

from __future__ import annotations

import asyncio
from typing import Any

def cat_parts(fs: Any, path: str, parts: list[tuple[int, int]], limit: int) -> list[Any]:
    """The bytes of each ``(start, end)`` of ``path``, at most ``limit`` requests in flight; a failed
    request's exception takes its place.  (``_cat_file`` is the public coroutine API of fsspec's
    ``AsyncFileSystem``, underscore and all.)"""
    if hasattr(fs, "for_many"):  # refindex's own HTTP requests: a large batch goes to fsspec's event loop
        fs = fs.for_many(len(parts), sum(b - a for a, b in parts))
    if len(parts) > 1 and getattr(fs, "async_impl", False) and not getattr(fs, "asynchronous", False) \
            and getattr(fs, "loop", None) is not None:
        from fsspec.asyn import sync

        return sync(fs.loop, _gather, fs, path, parts, max(1, int(limit)))
    try:
        return list(fs.cat_ranges([path] * len(parts), [a for a, _ in parts], [b for _, b in parts],
                                  on_error="return"))
    except Exception as e:  # noqa: BLE001 - the call itself failed: every part with it
        return [e] * len(parts)


async def _gather(fs: Any, path: str, parts: list[tuple[int, int]], limit: int) -> list[Any]:
    out: list[Any] = [None] * len(parts)
    todo = iter(range(len(parts)))

    async def worker() -> None:
        for i in todo:  # shared: each index is taken by one worker
            start, end = parts[i]
            try:
                out[i] = await fs._cat_file(path, start=start, end=end)
            except Exception as e:  # noqa: BLE001 - judged by the caller (retried when transient)
                out[i] = e

    await asyncio.gather(*(worker() for _ in range(min(limit, len(parts)))))
    return out
