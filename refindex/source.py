"""Open the bytes of an HDF5 file, local or remote, for h5py.

Local files are opened by path (libhdf5's own I/O is fastest there).  Remote files go
through fsspec behind :class:`BlockCache`, a read cache shaped for how libhdf5 reads
metadata: many small reads scattered over the file, each waiting for the previous one.
Blocks are kept for the whole scan (metadata is re-read often, the file is never
re-read twice by a scan), adjacent missing blocks are fetched in one request, and
every request and byte is counted so ``refindex scan --stats`` can report them.
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


@dataclass
class ReadStats:
    requests: int = 0
    bytes_fetched: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "bytes_fetched": self.bytes_fetched, "fetch_seconds": round(self.seconds, 4)}


@dataclass
class CacheOptions:
    """Settings of the remote read cache.

    ``block_size``: granularity of fetches and of the cache.  ``first_read``: bytes
    fetched at the start of the file on open (superblock, root group and usually much of
    the metadata live there).  ``max_gap``: missing blocks separated by at most this
    many cached bytes are still fetched in one request.
    """

    block_size: int = 1 << 20
    first_read: int = 4 << 20
    max_gap: int = 0


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
        if self.opts.first_read:
            self._fetch_range(0, min(self.size, self.opts.first_read))

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
            parts = [self.blocks[i] for i in range(first, last + 1)]
        buf = b"".join(parts)
        off = start - first * bs
        return buf[off : off + (end - start)]

    def _fetch_blocks(self, missing: list[int]) -> None:
        bs = self.opts.block_size
        gap_blocks = self.opts.max_gap // bs
        runs: list[list[int]] = [[missing[0], missing[0]]]
        for i in missing[1:]:
            if i - runs[-1][1] - 1 <= gap_blocks:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        for a, b in runs:
            self._fetch_range(a * bs, min(self.size, (b + 1) * bs))

    def _fetch_range(self, start: int, end: int) -> None:
        bs = self.opts.block_size
        start = (start // bs) * bs
        end = min(self.size, -(-end // bs) * bs)
        t0 = time.perf_counter()
        try:
            data = self.fs.cat_file(self.path, start=start, end=end)
        except FileNotFoundError as e:
            raise SourceError(f"file not found ({e})", file=self.path) from e
        except Exception as e:  # network and permission errors from any backend
            raise SourceError(f"could not read bytes {start}-{end}: {e}", file=self.path) from e
        self.stats.seconds += time.perf_counter() - t0
        self.stats.requests += 1
        self.stats.bytes_fetched += len(data)
        if len(data) != end - start:
            raise SourceError(f"short read at {start}: got {len(data)} of {end - start} bytes", file=self.path)
        for off in range(0, end - start, bs):
            self.blocks[(start + off) // bs] = data[off : off + bs]


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

    def read_bytes(self, url: str | None, start: int, length: int) -> bytes:
        """Bytes of the scanned file (``url`` None) or of another file next to it."""
        if url is None:
            fs, path = self.fs, self.path
        else:
            fs, path = fsspec.core.url_to_fs(url)
        try:
            return fs.cat_file(path, start=start, end=start + length)
        except FileNotFoundError as e:
            raise SourceError("file not found", file=url or self.url) from e


def split_protocol(url: str) -> tuple[str, str]:
    if "://" in url:
        proto, rest = url.split("://", 1)
        return proto, rest
    return "file", url


def _file_info(fs, path: str) -> dict[str, Any]:
    try:
        info = fs.info(path)
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
    head = raw.read_range(0, 8)
    if head != HDF5_SIGNATURE and not _has_signature_later(raw):
        raise NotHDF5Error("not an HDF5 file (no HDF5 signature)", file=url)
    try:
        h5 = h5py.File(raw, "r")
    except OSError as e:
        raise NotHDF5Error(f"h5py cannot open it: {e}", file=url) from e
    try:
        yield Source(h5=h5, url=url, size=info["size"], protocol=protocol, stats=stats, info=info, fs=fs, path=path)
    finally:
        h5.close()


def _has_signature_later(raw: BlockCache) -> bool:
    """HDF5 looks for its signature at 0, 512, 1024, 2048, ... (user blocks)."""
    off = 512
    while off + 8 <= raw.size and off <= (1 << 30):
        if raw.read_range(off, off + 8) == HDF5_SIGNATURE:
            return True
        off *= 2
    return False


def _check_signature_local(path: str, size: int) -> None:
    try:
        with open(path, "rb") as fh:
            off = 0
            while off + 8 <= size:
                fh.seek(off)
                if fh.read(8) == HDF5_SIGNATURE:
                    return
                off = 512 if off == 0 else off * 2
    except PermissionError as e:
        raise SourceError(f"permission denied ({e})", file=path) from e
    except IsADirectoryError as e:
        raise SourceError("is a directory", file=path) from e
    raise NotHDF5Error("not an HDF5 file (no HDF5 signature)", file=path)
