"""Open the bytes of an HDF5 file, local or remote, for h5py; what a file is when it is not HDF5.

Local files are opened by path (libhdf5's own I/O is fastest there).  Remote files go
through fsspec behind :class:`~refindex.source.BlockCache`, whose cache
:func:`~refindex.source.prefetch_tree` warms a tree level at a time.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from .. import urls
from ..errors import NotHDF5Error, SourceError
from ..options import FetchOptions
from ._cache import BlockCache, ReadStats, merge_ranges, serves_ranges
from ._failures import ranged, source_error
from ._http import honours
from ._quick import (filesystem_of, put_ahead, quick_filesystem, request_ahead, retried_in_thread,
                     taken_ahead)
from ._prefetch import TreeSeen, prefetch_tree
from ._record import LocalFile, ReadRecorder
from ._retry import with_retries
from ._validators import described

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


@dataclass
class Source:
    """An opened input: the h5py File plus what the index must record about it."""

    h5: Any
    url: str  # what the refs point at
    size: int
    protocol: str
    stats: ReadStats = field(default_factory=ReadStats)
    info: dict[str, Any] = field(default_factory=dict)  # size, etag/mtime for provenance
    fs: Any = None
    path: str = ""
    storage_options: dict[str, Any] = field(default_factory=dict)
    cache: BlockCache | None = None  # remote files: the metadata read cache libhdf5 reads through
    recorder: ReadRecorder | None = None  # what the scan read, when its index carries pages
    local: LocalFile | None = None  # a local file read through a recording file object
    seen: TreeSeen = field(default_factory=TreeSeen)  # what the prefetch saw of the tree (remote files)

    def fs_for(self, url: str) -> tuple[Any, str]:
        """(filesystem, path) of another file the scan needs (external storage, VDS sources, links).

        Files under the same protocol as the source get the source's storage options
        (endpoint, credentials), so a sibling object in the same bucket is reachable.
        """
        protocol, _ = urls.split(url)
        return urls.filesystem(url, self.storage_options if protocol == self.protocol else None)

    def fingerprint(self, headers: list[int], copied: list[tuple[int, bytes]]) -> dict[str, Any]:
        """The content fingerprint an index records of this file (see :mod:`refindex.source._fingerprint`),
        from bytes the scan has read: nothing is fetched for it."""
        from ._fingerprint import of_file

        if self.cache is not None:
            return of_file(self.size, headers, copied, self.cache.at_hand)
        with open(self.path, "rb") as fh:
            def at_hand(start: int, end: int) -> bytes:
                fh.seek(start)
                return fh.read(max(0, end - start))

            return of_file(self.size, headers, copied, at_hand)

    def distinct_bytes(self) -> int | None:
        """How many different bytes of the file the scan's requests brought (remote files; see ``stats``)."""
        from ._cache import distinct_bytes

        return None if self.cache is None else distinct_bytes(self.cache)

    def serves_ranges(self) -> bool:
        """Does the file's server answer a range request with that range, not the whole file?  (Local
        files and object stores do; an HTTP server is judged by its answers, :func:`serves_ranges`.)"""
        return self.cache is None or self.protocol not in ("http", "https") or serves_ranges(self.cache)

    def read_many(self, url: str | None, offsets: list[int], sizes: list[int]) -> list[bytes]:
        """Byte ranges of the scanned file (``url`` None) or of another file next to it, in few requests.

        Remote: what the metadata cache holds is served from it, the rest comes in one round
        trip of concurrent requests; ranges close to each other are read as one.
        """
        offsets, sizes = [int(o) for o in offsets], [int(n) for n in sizes]
        if not offsets:
            return []
        if url is None and self.cache is not None:
            return self.cache.read_ranges(offsets, sizes)
        if url is None and self.local is not None:
            return [self.local.pread(o, o + n) for o, n in zip(offsets, sizes)]
        fs, path = (self.fs, self.path) if url is None else self.fs_for(url)
        spans, where = merge_ranges(offsets, sizes)
        if url is None and self.protocol == "file":  # one open file, a positioned read per span
            datas = read_local(path, spans)
            return [datas[span][at : at + n] for (span, at), n in zip(where, sizes)]
        try:
            if len(spans) == 1:
                datas = [with_retries(fs.cat_file, path, start=spans[0][0], end=spans[0][1])]
            else:
                datas = with_retries(fs.cat_ranges, [path] * len(spans), [a for a, _ in spans], [b for _, b in spans])
        except Exception as e:
            raise source_error(e, url or self.url, "could not read") from e
        for i, ((a, b), d) in enumerate(zip(spans, datas)):
            if isinstance(d, BaseException):
                raise source_error(d, url or self.url, f"could not read bytes {a}-{b}") from d
            datas[i] = ranged(d, a, b, url or self.url)
        return [datas[span][at : at + n] for (span, at), n in zip(where, sizes)]

    def page_bytes(self, starts: list[int], ends: list[int]) -> list[bytes]:
        """The bytes of the scanned file's ranges ``starts[i]:ends[i]`` for its index's pages, not recorded:
        from the cache where it holds them (remote), the rest read in one round trip."""
        out: list[bytes | None] = [None] * len(starts)
        if self.cache is not None:
            out = [self.cache.bytes_of(a, b) for a, b in zip(starts, ends)]
        todo = [i for i, d in enumerate(out) if d is None]
        if todo:
            pause = self.recorder.paused() if self.recorder is not None else nullcontext()
            with pause:
                datas = self.read_many(None, [starts[i] for i in todo], [ends[i] - starts[i] for i in todo])
            for i, d in zip(todo, datas):
                out[i] = d
        return [d or b"" for d in out]


def read_local(path: str, spans: list[tuple[int, int]]) -> list[bytes]:
    """Byte ranges of a local file, read through one open file (fsspec's local ``cat_ranges`` opens
    the file again for every range: thousands of B-tree nodes are one seek and read each here)."""
    try:
        with open(path, "rb", buffering=0) as fh:
            datas = []
            for a, b in spans:
                fh.seek(a)
                datas.append(ranged(fh.read(b - a), a, b, path))
            return datas
    except OSError as e:
        raise SourceError(f"could not read bytes: {e}", file=path) from e


def file_info(fs: Any, path: str) -> dict[str, Any]:
    """What an index records about its source: size, and etag and/or mtime when the store has them."""
    return _checked_info(_stat(lambda: with_retries(fs.info, path), path), path)


def info_and_ends(fs: Any, path: str, fetch: FetchOptions) -> tuple[dict[str, Any], tuple[bytes, bytes] | None]:
    """:func:`file_info` and the file's head and tail for the block cache, in one round trip.

    The size is not known before the ``info`` call answers, so the tail is asked for as
    a suffix range (the last ``tail_read`` bytes plus a block, which :class:`BlockCache` cuts to
    whole blocks).  Filesystems that cannot (:func:`_suffix_ranges`), or reads that fail, leave the ends
    to the cache (None): only the ``info`` call's own failure is an error here.  The round trip
    :func:`~refindex.source.request_ahead` started for this file is taken, not asked again.
    """
    if not _suffix_ranges(fs) or not fetch.first_read or not fetch.tail_read:
        return file_info(fs, path), None
    spans = fetch.end_spans()
    ahead = taken_ahead(fs, path, spans)  # already asked for (refindex.h5py_file's first step)?
    info, head, tail = _stat(ahead.result if ahead is not None else
                             lambda: with_retries(info_with_ranges, fs, path, spans), path)
    ends = (head, tail) if isinstance(head, bytes) and isinstance(tail, bytes) else None
    return _checked_info(info, path), ends


def scan_ahead(url: str, storage_options: dict[str, Any] | None, fetch: FetchOptions | None = None
               ) -> Callable[[], None] | None:
    """Ask now, in a thread, for the first round trip a scan of the remote ``url`` will make (its
    info, head and tail: :func:`info_and_ends`), which that scan then takes instead of asking again.

    A batch asks it for several files at once before scanning them one after another, so their
    round trips overlap instead of each scan waiting for its own.  Returns a function that drops
    what no scan took; None where nothing was asked (a local file, a filesystem that cannot ask
    info and ranges in one round trip)."""
    fetch = fetch or FetchOptions()
    spans = fetch.end_spans()
    if urls.is_local(url) or not fetch.first_read or not fetch.tail_read:
        return None
    if honours(url, storage_options):
        return request_ahead(url, storage_options, spans)
    try:
        fs, path = quick_filesystem(url, storage_options)
    except SourceError:
        return None  # the scan reports it
    if not _suffix_ranges(fs):
        return None
    future = retried_in_thread("refindex-ahead", info_with_ranges, fs, path, spans)
    return put_ahead((fs, path, tuple(spans)), future)


def one_round_trip(fs: Any) -> bool:
    """Can ``fs`` ask for a file's ``info`` and byte ranges at once (:func:`info_with_ranges`)?"""
    return hasattr(fs, "info_and_ranges") or bool(getattr(fs, "async_impl", False))


def info_with_ranges(fs: Any, path: str, spans: list[tuple[int, int | None]], head: bool = True) -> list[Any]:
    """``[info, bytes of each span...]`` of a filesystem that can ask at once (:func:`one_round_trip`):
    refindex's own HTTP requests side by side in threads, an async fsspec filesystem on its event
    loop.  A failed range gives its exception; a failed ``info`` raises.  ``(-n, None)``: the last
    ``n`` bytes, where the filesystem reads a suffix range (:func:`_suffix_ranges`).  ``head=False``:
    the caller can do without validators, so refindex's HTTP client reads the info off the ranges'
    answers instead of asking it beside them (:meth:`~refindex.source.QuickHTTP.info_and_ranges`)."""
    if hasattr(fs, "info_and_ranges"):
        return fs.info_and_ranges(path, spans, head=head)
    import asyncio

    from fsspec.asyn import sync

    async def together() -> list[Any]:
        return await asyncio.gather(fs._info(path), *(fs._cat_file(path, start=a, end=b) for a, b in spans),
                                    return_exceptions=True)

    out = sync(fs.loop, together)
    if isinstance(out[0], BaseException):
        raise out[0]
    return out


def _checked_info(info: dict[str, Any], path: str) -> dict[str, Any]:
    """:func:`described` of an ``info`` answer; a folder (a prefix in an object store) is refused by name."""
    if info.get("type") == "directory":
        raise SourceError("is a directory (a folder or an object-store prefix), not a file", file=path)
    return described(info)


def _suffix_ranges(fs: Any) -> bool:
    """Does ``fs`` read a negative start as the file's last bytes (an HTTP suffix range), in the
    same round trip as its ``info`` (:func:`info_with_ranges`)?

    fsspec's async base class does (``_process_limits``); the filesystems known to use it
    for ranged reads (fsspec's http, s3fs) are asked so, and refindex's own HTTP requests.  Others are not trusted with it: a
    backend that read ``start=-n`` another way (gcsfs's concurrent reads split the range
    from ``start`` up) would put the wrong bytes where the cache keeps the file's tail.
    """
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    return one_round_trip(fs) and bool(set(protocols) & SUFFIX_RANGE_PROTOCOLS)


SUFFIX_RANGE_PROTOCOLS = {"http", "https", "s3", "s3a"}


def _stat(call: Any, path: str) -> Any:
    try:
        return call()
    except SourceError:
        raise
    except Exception as e:
        raise source_error(e, path) from e


def stat(url: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`file_info` of ``url`` (one ``info`` call): what freshness checks compare."""
    return file_info(*filesystem_of(url, storage_options))


@contextmanager
def open_source(
    url: str | os.PathLike,
    storage_options: dict[str, Any] | None = None,
    fetch: FetchOptions | None = None,
    recorder: ReadRecorder | None = None,
) -> Iterator[Source]:
    """Open ``url`` for scanning; the yielded Source's ``h5`` is an ``h5py.File``.

    ``recorder``: note every byte range read from the file (for the pages of its index);
    a local file is then read through a recording file object instead of by path.
    """
    import h5py

    url = os.fspath(url)
    protocol, path = urls.split(url)
    storage_options = dict(storage_options or {})
    if protocol == "file":
        fs, path = urls.filesystem(path)
        info = file_info(fs, path)
        _check_signature_local(path, info["size"])
        local = LocalFile(path, recorder) if recorder is not None else None
        try:
            h5 = h5py.File(local if local is not None else path, "r")
        except OSError as e:
            if local is not None:
                local.close()
            raise NotHDF5Error(f"h5py cannot open it: {e}", file=path) from e
        try:
            yield Source(h5=h5, url=path, size=info["size"], protocol="file", info=info, fs=fs, path=path,
                         recorder=recorder, local=local)
        finally:
            h5.close()
            if local is not None:
                local.close()
        return

    fs, path = quick_filesystem(url, storage_options)
    fetch = fetch or FetchOptions()
    t0 = time.perf_counter()
    info, ends = info_and_ends(fs, path, fetch)
    stats = ReadStats()
    if ends is not None:  # fetched together with the info call: one round trip, two requests
        stats.round_trips, stats.requests, stats.bytes_fetched = 1, 2, len(ends[0]) + len(ends[1])
        stats.seconds = time.perf_counter() - t0
    raw = BlockCache(fs, path, info["size"], fetch, stats, ends=ends)
    raw.recorder = recorder
    if not has_hdf5_signature(lambda off, n: raw.read_range(off, off + n), raw.size):
        raise NotHDF5Error(f"not an HDF5 file: {describe(raw.read_range(0, 64))}", file=url)
    try:
        h5 = h5py.File(raw, "r")
    except OSError as e:
        raise NotHDF5Error(f"h5py cannot open it: {e}", file=url) from e
    seen = TreeSeen()
    if raw.opts.prefetch_metadata:  # libhdf5's reads in it are recorded, its own parsing (peek) is not
        seen = prefetch_tree(h5, raw)
    try:
        yield Source(h5=h5, url=url, size=info["size"], protocol=protocol, stats=stats, info=info, fs=fs, path=path,
                     storage_options=storage_options, cache=raw, recorder=recorder, seen=seen)
    finally:
        h5.close()


def has_hdf5_signature(read, size: int) -> bool:
    """Is there an HDF5 signature where libhdf5 looks for one: at 0, 512, 1024, 2048, ... (user blocks)?

    ``read(offset, n)`` returns bytes of the file; ``size`` is its length.
    """
    off = 0
    while off + 8 <= size and off <= (1 << 30):
        if read(off, 8) == HDF5_SIGNATURE:
            return True
        off = 512 if off == 0 else off * 2
    return False


def _check_signature_local(path: str, size: int) -> None:
    try:
        with open(path, "rb") as fh:
            def read(off: int, n: int) -> bytes:
                fh.seek(off)
                return fh.read(n)

            if has_hdf5_signature(read, size):
                return
            head = read(0, 64)
    except PermissionError as e:
        raise SourceError(f"permission denied ({e})", file=path) from e
    except IsADirectoryError as e:
        raise SourceError("is a directory", file=path) from e
    raise NotHDF5Error(f"not an HDF5 file: {describe(head)}", file=path)


def describe(head: bytes) -> str:
    """What a file that is not HDF5 looks like, from its first bytes (for error messages)."""
    magic = [(b"\x89PNG", "a PNG image"), (b"%PDF", "a PDF document"), (b"PK\x03\x04", "a ZIP archive"),
             (b"\x1f\x8b", "a gzip file"), (b"CDF\x01", "a netCDF-3 file (netCDF-4 files are HDF5; this one is not)"),
             (b"CDF\x02", "a netCDF-3 file (netCDF-4 files are HDF5; this one is not)"),
             (b"PAR1", "a parquet file"), (b"II*\x00", "a TIFF image"), (b"MM\x00*", "a TIFF image")]
    for prefix, what in magic:
        if head.startswith(prefix):
            return f"it is {what}"
    if not head:
        return "it is empty"
    if head.startswith(HDF5_SIGNATURE):
        return "it is an HDF5 file"
    text = head.lstrip()
    if text[:1] in (b"{", b"["):
        return "it is JSON, not an HDF5 file"
    try:
        sample = head.decode("utf-8")
    except UnicodeDecodeError:
        return f"it starts with {head[:8]!r}, not with the HDF5 signature"
    if sample.isprintable() or all(c.isprintable() or c in "\r\n\t" for c in sample):
        return f"it is a text file (starts with {sample[:24]!r})"
    return f"it starts with {head[:8]!r}, not with the HDF5 signature"
