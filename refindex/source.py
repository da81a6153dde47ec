"""Open the bytes of an HDF5 file, local or remote, for h5py.

Local files are opened by path (libhdf5's own I/O is fastest there).  Remote files go
through fsspec behind :class:`BlockCache`, a read cache shaped for how libhdf5 reads
metadata: many small reads scattered over the file, each waiting for the previous one.
Blocks are kept for the whole scan (metadata is re-read often, the file is never
re-read twice by a scan), adjacent missing blocks are fetched in one request, head and
tail of the file are fetched together on open, :mod:`refindex.prefetch` batches the
scattered rest a tree level at a time, and every request, round trip and byte is
counted so ``refindex scan --stats`` can report them.
"""

from __future__ import annotations

import io
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import fsspec

from .errors import NotHDF5Error, SourceError

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

# Transient network failures are retried with exponential backoff: RETRIES more
# attempts, waiting RETRY_BACKOFF, 2x, 4x... seconds.
RETRIES = 3
RETRY_BACKOFF = 0.25
_TRANSIENT_NAMES = {"ClientConnectorError", "ServerDisconnectedError", "ClientOSError", "ClientPayloadError",
                    "ServerTimeoutError", "EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
                    "ConnectionClosedError", "IncompleteReadError", "ResponseStreamingError"}


def is_transient(e: BaseException) -> bool:
    """A failure worth retrying: connection drops, timeouts, throttling and 5xx responses."""
    # fsspec's http reports any failed request as FileNotFoundError: look at the cause too.
    for x in (e, e.__cause__, e.__context__):
        if x is None:
            continue
        if type(x).__name__ in _TRANSIENT_NAMES:
            return True
        status = getattr(x, "status", None) or getattr(x, "code", None)
        if isinstance(status, int) and (status == 429 or 500 <= status < 600):
            return True
    if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    if isinstance(e, (ConnectionError, TimeoutError)):
        return True
    text = str(e)
    return any(s in text for s in ("SlowDown", "Throttl", "503 Service", "Service Unavailable"))


def with_retries(call, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, retried on transient failures (other failures raise at once)."""
    for attempt in range(RETRIES + 1):
        try:
            return call(*args, **kwargs)
        except Exception as e:
            if attempt == RETRIES or not is_transient(e):
                raise
            time.sleep(RETRY_BACKOFF * (2 ** attempt))


@dataclass
class ReadStats:
    requests: int = 0
    bytes_fetched: int = 0
    seconds: float = 0.0
    round_trips: int = 0  # waits: concurrent requests count once

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "round_trips": self.round_trips, "bytes_fetched": self.bytes_fetched,
                "fetch_seconds": round(self.seconds, 4)}


@dataclass
class CacheOptions:
    """Settings of the remote read cache.

    Defaults are tuned on a pynwb file behind 30 ms / 50 MB/s (benchmarks/p2_remote_index.py):
    its metadata sits in a few KiB at the start, a few hundred KiB at the end and small
    islands in between.  A round trip costs as much as ~1.5 MB of transfer there, so on
    open the head and tail are fetched at once (concurrently), and each later miss
    fetches its block plus ``neighbours`` blocks either side in one request.

    ``block_size``: granularity of fetches and of the cache.  ``first_read``: bytes
    fetched at the start of the file on open (superblock, root group).  ``tail_read``:
    bytes fetched at the end on open, in parallel with ``first_read`` (libhdf5 writes
    metadata flushed at close there).  ``neighbours``: extra blocks fetched on each side
    of a miss.  ``max_gap``: missing blocks separated by at most this many cached bytes
    are still fetched in one request.  ``prefetch_metadata``: before the scan, walk the
    group tree level by level and fetch each level's object headers, group B-trees, heaps
    and chunk B-tree roots in concurrent batches (see :mod:`refindex.prefetch`), instead
    of one round trip per scattered structure during the scan.
    """

    block_size: int = 64 << 10
    first_read: int = 1 << 20
    tail_read: int = 1 << 20
    neighbours: int = 1
    max_gap: int = 0
    prefetch_metadata: bool = True


class BlockCache(io.RawIOBase):
    """A read-only, seekable file over ``fs.cat_file`` with a keep-everything block cache."""

    def __init__(self, fs, path: str, size: int, options: CacheOptions | None = None, stats: ReadStats | None = None):
        super().__init__()
        self.fs = fs
        self.path = path
        self.size = int(size)
        self.opts = options or CacheOptions()
        self.stats = stats or ReadStats()
        self.blocks: dict[int, bytes] = {}
        self.pos = 0
        self._lock = threading.Lock()
        head = min(self.size, self.opts.first_read)
        tail = max(head, self.size - self.opts.tail_read) if self.opts.tail_read else self.size
        ranges = [(0, head)] if head else []
        if tail < self.size:
            ranges.append((tail, self.size))
        if ranges:
            self._fetch_ranges(ranges)

    # io.RawIOBase protocol -------------------------------------------------
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            self.pos = offset
        elif whence == 1:
            self.pos += offset
        else:
            self.pos = self.size + offset
        return self.pos

    def readinto(self, b) -> int:
        data = self.read(len(b))
        n = len(data)
        b[:n] = data
        return n

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self.pos
        data = self.read_range(self.pos, self.pos + n)
        self.pos += len(data)
        return data

    # cache -----------------------------------------------------------------
    def read_range(self, start: int, end: int) -> bytes:
        start, end = max(0, start), min(self.size, end)
        if end <= start:
            return b""
        bs = self.opts.block_size
        first, last = start // bs, (end - 1) // bs
        with self._lock:
            missing = [i for i in range(first, last + 1) if i not in self.blocks]
            if missing:
                self._fetch_blocks(missing)
            return self._cached(start, end)

    def _cached(self, start: int, end: int) -> bytes:
        """Bytes ``start:end`` from blocks that are all cached."""
        bs = self.opts.block_size
        first, last = start // bs, (end - 1) // bs
        buf = b"".join(self.blocks[i] for i in range(first, last + 1))
        off = start - first * bs
        return buf[off : off + (end - start)]

    def prefetch(self, offsets: list[int]) -> None:
        """Fetch the blocks holding ``offsets`` (with neighbours) that are not cached yet, at once."""
        bs = self.opts.block_size
        with self._lock:
            missing = sorted({o // bs for o in offsets if 0 <= o < self.size} - self.blocks.keys())
            if missing:
                self._fetch_blocks(missing)

    def _fetch_blocks(self, missing: list[int]) -> None:
        """Fetch ``missing`` blocks and their uncached neighbours; runs in one round trip."""
        bs = self.opts.block_size
        nblocks = -(-self.size // bs)
        n = max(0, self.opts.neighbours)
        want = sorted({j for i in missing for j in range(max(0, i - n), min(nblocks, i + n + 1))
                       if j not in self.blocks} | set(missing))
        gap_blocks = self.opts.max_gap // bs
        runs: list[list[int]] = [[want[0], want[0]]]
        for i in want[1:]:
            if i - runs[-1][1] - 1 <= gap_blocks:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        self._fetch_ranges([(a * bs, min(self.size, (b + 1) * bs)) for a, b in runs])

    def _fetch_ranges(self, ranges: list[tuple[int, int]]) -> None:
        """Fetch block-aligned ``ranges`` into the cache, several at once when the filesystem allows it."""
        bs = self.opts.block_size
        ranges = [((a // bs) * bs, min(self.size, -(-b // bs) * bs)) for a, b in ranges]
        for (start, end), data in zip(ranges, self._get(ranges)):
            for off in range(0, end - start, bs):
                self.blocks[(start + off) // bs] = data[off : off + bs]

    def _get(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of ``ranges`` in one round trip (concurrent requests), retried, counted, checked."""
        t0 = time.perf_counter()

        def fetch() -> list[Any]:
            if len(ranges) == 1:
                datas: list[Any] = [self.fs.cat_file(self.path, start=ranges[0][0], end=ranges[0][1])]
            else:  # async filesystems (http, s3, gcs) run these concurrently
                datas = self.fs.cat_ranges([self.path] * len(ranges), [a for a, _ in ranges],
                                           [b for _, b in ranges])
            for d in datas:
                if isinstance(d, BaseException):
                    raise d
            return datas

        try:
            datas = with_retries(fetch)
        except FileNotFoundError as e:
            raise SourceError(f"file not found ({e})", file=self.path) from e
        except SourceError:
            raise
        except Exception as e:  # network and permission errors from any backend
            where = ", ".join(f"{a}-{b}" for a, b in ranges)
            raise SourceError(f"could not read bytes {where}: {e}", file=self.path) from e
        self.stats.seconds += time.perf_counter() - t0
        self.stats.round_trips += 1
        for (start, end), data in zip(ranges, datas):
            self.stats.requests += 1
            self.stats.bytes_fetched += len(data)
            if len(data) != end - start:
                raise SourceError(f"short read at {start}: got {len(data)} of {end - start} bytes", file=self.path)
        return datas

    def read_ranges(self, offsets: list[int], sizes: list[int]) -> list[bytes]:
        """Many ``(offset, size)`` ranges: cached ones from the blocks, the rest in one round trip.

        The rest is fetched exactly (ranges close to each other merged), not as whole
        blocks: small values scattered over a file (scalars beside large data) would
        otherwise cost a block each.  Those bytes are not kept.
        """
        bs = self.opts.block_size
        out: list[bytes | None] = [None] * len(offsets)
        todo: list[int] = []
        with self._lock:
            for i, (o, n) in enumerate(zip(offsets, sizes)):
                blocks = range(o // bs, (o + n - 1) // bs + 1) if n else range(0)
                if all(b in self.blocks for b in blocks):
                    out[i] = self._cached(o, o + n) if n else b""
                else:
                    todo.append(i)
            if todo:
                spans, where = merge_ranges([offsets[i] for i in todo], [sizes[i] for i in todo])
                datas = self._get(spans)
                for i, (span, at) in zip(todo, where):
                    out[i] = datas[span][at : at + sizes[i]]
        return [b if b is not None else b"" for b in out]


def merge_ranges(offsets: list[int], sizes: list[int], max_gap: int = 64 << 10,
                 max_span: int = 64 << 20) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Byte ranges merged where they lie close: (spans, and per input range its (span, offset in span)).

    A gap of ``max_gap`` bytes costs less to transfer than a request costs to wait for;
    no span grows beyond ``max_span``.
    """
    order = sorted(range(len(offsets)), key=offsets.__getitem__)
    spans: list[tuple[int, int]] = []
    where: list[tuple[int, int]] = [(0, 0)] * len(offsets)
    for i in order:
        start, end = offsets[i], offsets[i] + sizes[i]
        if spans and start - spans[-1][1] <= max_gap and end - spans[-1][0] <= max_span:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
        where[i] = (len(spans) - 1, start - spans[-1][0])
    return spans, where


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

    def fs_for(self, url: str) -> tuple[Any, str]:
        """(filesystem, path) of another file the scan needs (external storage, VDS sources, links).

        Files under the same protocol as the source get the source's storage options
        (endpoint, credentials), so a sibling object in the same bucket is reachable.
        """
        protocol, _ = split_protocol(url)
        opts = self.storage_options if protocol == self.protocol else {}
        return fsspec.core.url_to_fs(url, **opts)

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
        fs, path = (self.fs, self.path) if url is None else self.fs_for(url)
        spans, where = merge_ranges(offsets, sizes)
        try:
            if len(spans) == 1:
                datas = [with_retries(fs.cat_file, path, start=spans[0][0], end=spans[0][1])]
            else:
                datas = with_retries(fs.cat_ranges, [path] * len(spans), [a for a, _ in spans], [b for _, b in spans])
        except FileNotFoundError as e:
            raise SourceError("file not found", file=url or self.url) from e
        for (a, b), d in zip(spans, datas):
            if isinstance(d, BaseException):
                raise SourceError(f"could not read bytes {a}-{b}: {d}", file=url or self.url) from d
            if len(d) != b - a:
                raise SourceError(f"short read at {a}: got {len(d)} of {b - a} bytes", file=url or self.url)
        return [datas[span][at : at + n] for (span, at), n in zip(where, sizes)]


def split_protocol(url: str) -> tuple[str, str]:
    if "://" in url:
        proto, rest = url.split("://", 1)
        return proto, rest
    return "file", url


def _file_info(fs, path: str) -> dict[str, Any]:
    try:
        info = with_retries(fs.info, path)
    except FileNotFoundError as e:
        raise SourceError("file not found", file=path) from e
    except PermissionError as e:
        raise SourceError(f"permission denied ({e})", file=path) from e
    except Exception as e:
        raise SourceError(f"could not stat file: {e}", file=path) from e
    out: dict[str, Any] = {"size": int(info.get("size") or 0)}
    for key in ("ETag", "etag", "md5Hash", "generation"):
        if info.get(key):
            out["etag"] = str(info[key]).strip('"')
            break
    mtime = info.get("mtime") or info.get("LastModified") or info.get("last_modified") or info.get("updated")
    if mtime is not None:
        out["mtime"] = mtime.isoformat() if hasattr(mtime, "isoformat") else float(mtime)
    return out


@contextmanager
def open_source(
    url: str | os.PathLike,
    storage_options: dict[str, Any] | None = None,
    cache: CacheOptions | None = None,
) -> Iterator[Source]:
    """Open ``url`` for scanning; the yielded Source's ``h5`` is an ``h5py.File``."""
    import h5py

    url = os.fspath(url)
    protocol, _ = split_protocol(url)
    storage_options = dict(storage_options or {})
    if protocol == "file":
        path = os.path.abspath(url[len("file://") :] if url.startswith("file://") else url)
        fs = fsspec.filesystem("file")
        info = _file_info(fs, path)
        _check_signature_local(path, info["size"])
        try:
            h5 = h5py.File(path, "r")
        except OSError as e:
            raise NotHDF5Error(f"h5py cannot open it: {e}", file=path) from e
        try:
            yield Source(h5=h5, url=path, size=info["size"], protocol="file", info=info, fs=fs, path=path)
        finally:
            h5.close()
        return

    try:
        fs, path = fsspec.core.url_to_fs(url, **storage_options)
    except Exception as e:
        raise SourceError(f"cannot open filesystem for {protocol}://: {e}", file=url) from e
    info = _file_info(fs, path)
    stats = ReadStats()
    raw = BlockCache(fs, path, info["size"], cache, stats)
    if not has_hdf5_signature(lambda off, n: raw.read_range(off, off + n), raw.size):
        raise NotHDF5Error(f"not an HDF5 file: {describe(raw.read_range(0, 64))}", file=url)
    try:
        h5 = h5py.File(raw, "r")
    except OSError as e:
        raise NotHDF5Error(f"h5py cannot open it: {e}", file=url) from e
    if raw.opts.prefetch_metadata:
        from .prefetch import prefetch_tree

        prefetch_tree(h5, raw)
    try:
        yield Source(h5=h5, url=url, size=info["size"], protocol=protocol, stats=stats, info=info, fs=fs, path=path,
                     storage_options=storage_options, cache=raw)
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
