"""A loopback object store with the round-trip cost of a real one.

An HTTP/1.1 server on 127.0.0.1 serving one directory with ``Range`` support (suffix ranges
too), keep-alive connections and ``HEAD``.  Every request waits ``latency`` before its
headers and sends its body at ``bandwidth`` (per connection); the server counts requests and
bytes, so benchmarks can report what a reader fetched.
``GET /_store/counts`` returns those counts as JSON (neither counted nor delayed), so a
reader in another process can tell what each of its own steps fetched.
fsspec's ``http`` filesystem reads it like any web server or presigned S3 URL.  With ``bucket=``
it also speaks the part of the S3 API a reader of an archive uses (path-style ``HEAD``/``GET`` of
``/<bucket>/<key>`` and ``ListObjectsV2`` with prefix, delimiter and pages of 1,000 keys), so s3fs
reads it as a bucket (:meth:`LatencyStore.s3_options`): a listing is one request per 1,000 objects,
each with its size, ETag and Last-Modified, as a real store's.

It runs on an event loop in a thread of its own (uvloop's where installed, the ``bench``
extra; benchmarks run the readers in child processes): waiting costs a timer, not a thread,
so the store serves thousands of requests a second, as a real object store does, and the
limit a benchmark measures is the reader's.  Python's ThreadingHTTPServer, used before, spent
1.5-2.2 ms of CPU per small request (a thread per connection fighting for the GIL) and capped
every reader at ~500 requests a second; this one spends ~110 us (uvloop) to ~150 us (asyncio),
most of it in the socket's system calls.  A body up to 64 KiB goes out with its headers in
one write, after one wait of the latency plus its pacing: it arrives when it would have.
Longer bodies go out a piece at a time, each when the body's bytes so far are due at
``bandwidth`` (the old server slept a piece's time after each piece, so the time it took to
read and write pieces, long on a busy machine, slowed every big transfer below ``bandwidth``).

Run alone to serve a folder:  python benchmarks/latency_store.py benchmarks/out
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import stat
import threading
import time
from email.utils import formatdate
from typing import Any
from urllib.parse import parse_qs, quote, unquote
from xml.sax.saxutils import escape

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
COUNTS_PATH = "/_store/counts"
PIECE = 256 << 10  # bytes written (and paced) at a time
IDLE_TIMEOUT = 30  # seconds a keep-alive connection may wait for its next request (a stuck client is let go)
# A body up to this size is read on the loop and sent with its headers in one write, after one wait of the
# latency plus its pacing (so it arrives when it would have; its headers come up to 1.3 ms later at 50 MB/s).
SMALL_BODY = 64 << 10
_REASONS = {200: "OK", 206: "Partial Content", 400: "Bad Request", 404: "Not Found", 416: "Requested Range Not Satisfiable",
            501: "Not Implemented"}


class _Closed(Exception):
    """The connection ends (client gone, idle too long, or it asked to close)."""


class _Store:
    """The store's state (its folder, costs and counts) and the handling of one connection."""

    def __init__(self, root: str, latency: float, bandwidth: float, bucket: str | None = None):
        self.root = os.path.realpath(root)
        self.bucket = bucket  # S3 too: /<bucket>/<key> is <root>/<key>; GET /<bucket>?list-type=2 lists
        self.latency = latency
        self.bandwidth = bandwidth
        self.requests = 0
        self.head_requests = 0
        self.bytes_sent = 0
        self.lock = threading.Lock()  # counts are read and reset from other threads
        self._date = (0, "")
        # System calls are most of a request's cost (a VM's are slow): a URL path's resolved file and
        # an open descriptor of it are kept (a replaced file, a new inode, is opened again).
        self._paths: dict[str, str | None] = {}
        self._fds: dict[str, tuple[int, tuple[int, int]]] = {}
        self._retired: list[int] = []  # descriptors of replaced files (a response may still be sending from one)
        # files written by PUT: (inode, mtime, size) as written -> their ETag, the MD5 of their bytes (S3's);
        # other files' ETag is made of their mtime and size
        self.written: dict[str, tuple[tuple[int, int, int], str]] = {}

    def close(self) -> None:
        for fd in [fd for fd, _ in self._fds.values()] + self._retired:
            os.close(fd)
        self._fds.clear()
        self._retired.clear()

    # counts ---------------------------------------------------------------
    def count(self, nbytes: int, head: bool = False, request: bool = True) -> None:
        with self.lock:
            self.requests += int(request)
            self.head_requests += int(head)
            self.bytes_sent += nbytes

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {"requests": self.requests, "head_requests": self.head_requests, "bytes": self.bytes_sent}

    # one connection ----------------------------------------------------------
    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Requests of one keep-alive connection, one after another."""
        try:
            while True:
                try:
                    async with asyncio.timeout(IDLE_TIMEOUT):
                        head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                    break
                if not await self.request(head, reader, writer):
                    break
        except (ConnectionError, _Closed, asyncio.CancelledError):
            pass  # a client that hangs up mid-response (a reader that gave up), or the store closing: no error
        finally:
            writer.close()

    async def request(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must close after it."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self.respond(writer, 400, {"Content-Length": "0", "Connection": "close"})
            return False
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        conn = headers.get("connection", "").lower()
        keep = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
        if method == "PUT" and self.bucket is not None:
            await self.put(target, headers, reader, writer)
            await writer.drain()
            return keep
        body = int(headers.get("content-length") or 0)
        if body:  # GET and HEAD carry none; read past one all the same
            await reader.readexactly(body)
        if method == "GET":
            await self.get(target, headers.get("range"), writer)
        elif method == "HEAD":
            await self.head(target, writer)
        else:
            self.respond(writer, 501, {"Content-Length": "0", "Connection": "close"})
            return False
        await writer.drain()
        return keep

    def resolve(self, target: str) -> tuple[str, os.stat_result] | None:
        """The file a URL path names, inside the folder (symbolic links followed), and its stat now."""
        full = self._paths.get(target, "")
        if full == "":
            if len(self._paths) > 10_000:
                self._paths.clear()
            rel = unquote(target.split("?", 1)[0]).lstrip("/")
            if self.bucket is not None and rel.startswith(self.bucket + "/"):
                rel = rel[len(self.bucket) + 1:]
            full = os.path.realpath(os.path.join(self.root, rel))
            full = self._paths[target] = full if full.startswith(self.root + os.sep) else None
        if full is None:
            return None
        try:
            st = os.stat(full)
        except OSError:
            return None
        return (full, st) if stat.S_ISREG(st.st_mode) else None

    def descriptor(self, full: str, st: os.stat_result) -> int:
        """An open descriptor of ``full`` as it is now (``st``)."""
        fd, ident = self._fds.get(full, (-1, (0, 0)))
        if ident != (st.st_dev, st.st_ino):
            if fd >= 0:
                self._retired.append(fd)
            fd = os.open(full, os.O_RDONLY)
            self._fds[full] = (fd, (st.st_dev, st.st_ino))
        return fd

    async def head(self, target: str, writer: asyncio.StreamWriter) -> None:
        self.count(0, head=True)
        await self.wait()
        found = self.resolve(target)
        if found is None:
            return self.respond(writer, 404, {"Content-Length": "0"})
        self.respond(writer, 200, {"Content-Length": str(found[1].st_size), "Accept-Ranges": "bytes",
                                   **self.validators(found[1], found[0])})

    async def put(self, target: str, headers: dict[str, str], reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter) -> None:
        """S3's PutObject: the body (plain, or botocore's ``aws-chunked`` with a checksum trailer) becomes the
        file at the key, replaced whole (a temporary file renamed); its ETag is the MD5 of its bytes, as S3's
        is for an object written in one request."""
        import hashlib

        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
        if "aws-chunked" in headers.get("content-encoding", "") or \
                headers.get("x-amz-content-sha256", "").startswith("STREAMING-"):
            parts = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers (the checksum), then a blank line
                        pass
                    break
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            data = b"".join(parts)
        else:
            data = await reader.readexactly(int(headers.get("content-length") or 0))
        self.count(0)
        await self.wait(len(data) / self.bandwidth if self.bandwidth else 0.0)
        rel = unquote(target.split("?", 1)[0]).lstrip("/")
        if self.bucket is None or not rel.startswith(self.bucket + "/"):
            return self.respond(writer, 404, {"Content-Length": "0"})
        full = os.path.realpath(os.path.join(self.root, rel[len(self.bucket) + 1:]))
        if not full.startswith(self.root + os.sep):
            return self.respond(writer, 400, {"Content-Length": "0"})
        os.makedirs(os.path.dirname(full), exist_ok=True)
        part = f"{full}.{os.getpid()}.{id(data)}.part"
        with open(part, "wb") as fh:
            fh.write(data)
        os.replace(part, full)
        st = os.stat(full)
        self.written[full] = ((st.st_ino, st.st_mtime_ns, st.st_size), f'"{hashlib.md5(data).hexdigest()}"')
        self._paths.pop(target, None)
        self.respond(writer, 200, {"Content-Length": "0", **self.validators(st, full)})

    def validators(self, st: os.stat_result, full: str = "") -> dict[str, str]:
        """ETag on every answer, as S3 sends it; in S3 mode also Last-Modified (what s3fs's info reads)."""
        out = {"ETag": self.etag(st, full)}
        if self.bucket is not None:
            out["Last-Modified"] = formatdate(int(st.st_mtime), usegmt=True)
        return out

    def etag(self, st: os.stat_result, full: str) -> str:
        ident, tag = self.written.get(full, ((-1, -1, -1), ""))
        return tag if ident == (st.st_ino, st.st_mtime_ns, st.st_size) else _etag(st)

    def listing(self, query: str) -> tuple[int, bytes]:
        """A ListObjectsV2 answer: keys under ``prefix`` after the continuation token, sorted, at most
        ``max-keys`` (1,000) a page; with a ``delimiter`` a deeper key is rolled into its common prefix."""
        q = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
        if q.get("list-type") != "2":
            return 501, b""
        prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
        after = q.get("continuation-token") or q.get("start-after") or ""
        limit = min(1000, int(q.get("max-keys") or 1000))
        entries: list[tuple[str, os.stat_result | None]] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            base = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            if not (base.startswith(prefix) or prefix.startswith(base)):
                dirnames[:] = []
                continue
            for name in filenames:
                key = base + name
                if key.startswith(prefix) and not name.endswith(".part"):
                    entries.append((key, os.path.join(dirpath, name)))
        shown: dict[str, str | None] = {}
        for key, full in entries:
            if delimiter and delimiter in key[len(prefix):]:
                key, full = key[:len(prefix) + key[len(prefix):].index(delimiter) + len(delimiter)], None
            shown.setdefault(key, full)
        keys = sorted(k for k in shown if k > after)
        page, more = keys[:limit], len(keys) > limit
        enc = (lambda t: quote(t, safe="/")) if q.get("encoding-type") == "url" else escape
        parts = [f"<Name>{self.bucket}</Name><Prefix>{enc(prefix)}</Prefix><KeyCount>{len(page)}</KeyCount>"
                 f"<MaxKeys>{limit}</MaxKeys><IsTruncated>{'true' if more else 'false'}</IsTruncated>"]
        if delimiter:
            parts.append(f"<Delimiter>{enc(delimiter)}</Delimiter>")
        if q.get("encoding-type") == "url":
            parts.append("<EncodingType>url</EncodingType>")
        if more:
            parts.append(f"<NextContinuationToken>{escape(page[-1])}</NextContinuationToken>")
        for key in page:
            full = shown[key]
            if full is None:
                parts.append(f"<CommonPrefixes><Prefix>{enc(key)}</Prefix></CommonPrefixes>")
            else:
                st = os.stat(full)
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(int(st.st_mtime)))
                parts.append(f"<Contents><Key>{enc(key)}</Key><LastModified>{stamp}</LastModified>"
                             f"<ETag>{escape(self.etag(st, full))}</ETag><Size>{st.st_size}</Size>"
                             "<StorageClass>STANDARD</StorageClass></Contents>")
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
                'xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' + "".join(parts) + "</ListBucketResult>")
        return 200, body.encode()

    async def get(self, target: str, rng: str | None, writer: asyncio.StreamWriter) -> None:
        if target == COUNTS_PATH:
            body = json.dumps(self.counts()).encode()
            return self.respond(writer, 200, {"Content-Type": "application/json", "Content-Length": str(len(body))},
                                body)
        path, _, query = target.partition("?")
        if self.bucket is not None and path.strip("/") == self.bucket:  # ListObjectsV2
            self.count(0)
            code, body = self.listing(query)
            await self.wait(len(body) / self.bandwidth if self.bandwidth else 0.0)
            self.count(len(body), request=False)
            return self.respond(writer, code, {"Content-Type": "application/xml", "Content-Length": str(len(body))},
                                body)
        found = self.resolve(target)
        if found is None:
            self.count(0)
            return self.respond(writer, 404, {"Content-Length": "0"})
        full, size = found[0], found[1].st_size
        start, end, status = 0, size, 200
        if rng:
            m = _RANGE.match(rng.strip())
            if not m or (not m.group(1) and not m.group(2)):
                self.count(0)
                return self.respond(writer, 416, {"Content-Length": "0"})
            if m.group(1):
                start = int(m.group(1))
                end = min(size, int(m.group(2)) + 1) if m.group(2) else size
            else:  # suffix range: last N bytes
                start = max(0, size - int(m.group(2)))
            if start >= size or end <= start:
                self.count(0)
                return self.respond(writer, 416, {"Content-Length": "0"})
            status = 206
        self.count(0)
        headers = {"Content-Length": str(end - start), "Accept-Ranges": "bytes", **self.validators(found[1], full)}
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        fd = self.descriptor(full, found[1])
        if end - start <= SMALL_BODY:  # headers and body in one write, after the wait and the body's pacing
            piece = os.pread(fd, end - start, start)
            self.count(len(piece), request=False)
            await self.wait(len(piece) / self.bandwidth if self.bandwidth else 0.0)
            self.respond(writer, status, headers, piece)
            if len(piece) != end - start:
                raise _Closed("the file shrank while being sent")
            return None
        await self.wait()
        self.respond(writer, status, headers)
        await self.body(writer, fd, start, end - start)

    async def body(self, writer: asyncio.StreamWriter, fd: int, start: int, n: int) -> None:
        """The bytes at ``bandwidth``, a piece at a time, each counted as it goes out.

        A client that hangs up early (remfile's first GET only wants Content-Length) waits
        for, and is counted for, what it took, not the whole file, as from a real store."""
        loop = asyncio.get_running_loop()
        began, sent = loop.time(), 0
        while n > 0:
            # a piece may come from disk (a file of gigabytes): read in a thread, the loop serves on
            piece = await loop.run_in_executor(None, os.pread, fd, min(n, PIECE), start)
            if not piece:
                raise _Closed("the file shrank while being sent")
            self.count(len(piece), request=False)
            sent += len(piece)
            if self.bandwidth:  # paced against the body's start: delays of a busy machine do not add up
                ahead = began + sent / self.bandwidth - loop.time()
                if ahead > 0:
                    await asyncio.sleep(ahead)
            if writer.is_closing():
                raise _Closed("client gone")
            writer.write(piece)
            await writer.drain()
            start += len(piece)
            n -= len(piece)

    async def wait(self, extra: float = 0.0) -> None:
        """The round trip before the first byte (and ``extra``: a small body's pacing)."""
        if self.latency + extra > 0:
            await asyncio.sleep(self.latency + extra)

    def respond(self, writer: asyncio.StreamWriter, code: int, headers: dict[str, str], body: bytes = b"") -> None:
        """Status line and headers (and a small ``body``) in one write."""
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, formatdate(now, usegmt=True))
        text = [f"HTTP/1.1 {code} {_REASONS.get(code, '')}", "Server: latency-store", f"Date: {self._date[1]}"]
        text += [f"{k}: {v}" for k, v in headers.items()]
        writer.write(("\r\n".join(text) + "\r\n\r\n").encode("latin-1") + body)


def _etag(st: os.stat_result) -> str:
    return f'"{int(st.st_mtime)}-{st.st_size}"'


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where installed (``LATENCY_STORE_LOOP=asyncio`` to compare), else asyncio's."""
    if os.environ.get("LATENCY_STORE_LOOP", "uvloop") == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class LatencyStore:
    """``with LatencyStore(folder) as store: store.url("f.nwb")`` -> an http:// URL on 127.0.0.1.

    ``latency``: seconds added to every request; ``bandwidth``: bytes/second per
    connection.  ``store.reset()`` zeroes the counters, ``store.counts()`` reads them.
    """

    def __init__(self, root: str | os.PathLike, latency: float = 0.030, bandwidth: float = 50e6,
                 bucket: str | None = None):
        self._store = _Store(os.fspath(root), latency, bandwidth, bucket)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._address: tuple[str, int] = ("127.0.0.1", 0)

    @property
    def base(self) -> str:
        host, port = self._address
        return f"http://{host}:{port}"

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def adopt(self, folder: str | os.PathLike) -> int:
        """Every file below ``folder`` (inside the store's) is one a PUT wrote: its ETag is the MD5 of its bytes
        from now on (a folder of objects restored from a copy, as S3 would have kept them); returns how many."""
        import hashlib

        n = 0
        for dirpath, _, filenames in os.walk(os.path.realpath(folder)):
            for name in filenames:
                full = os.path.join(dirpath, name)
                with open(full, "rb") as fh:
                    tag = f'"{hashlib.md5(fh.read()).hexdigest()}"'
                st = os.stat(full)
                with self._store.lock:
                    self._store.written[full] = ((st.st_ino, st.st_mtime_ns, st.st_size), tag)
                n += 1
        return n

    def s3_url(self, name: str) -> str:
        """``s3://<bucket>/<name>``: the store's file ``name`` as s3fs names it (``bucket=`` given)."""
        assert self._store.bucket is not None, "LatencyStore(..., bucket=...) speaks S3"
        return f"s3://{self._store.bucket}/{name}"

    def s3_options(self) -> dict[str, Any]:
        """s3fs's storage options for the store: its endpoint, unsigned requests (no credentials to find)."""
        return {"endpoint_url": self.base, "anon": True, "client_kwargs": {"region_name": "us-east-1"}}

    def reset(self) -> None:
        with self._store.lock:
            self._store.requests = self._store.head_requests = self._store.bytes_sent = 0

    def counts(self) -> dict[str, int]:
        return self._store.counts()

    @property
    def counts_url(self) -> str:
        """Where :func:`fetch_counts` reads :meth:`counts` from another process."""
        return self.base + COUNTS_PATH

    def __enter__(self) -> "LatencyStore":
        self._loop = _new_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="latency-store", daemon=True)
        self._thread.start()
        # backlog: the default 100 could drop SYNs of hundreds of concurrent connections (1 s retransmit stalls)
        start = asyncio.start_server(self._store.connection, "127.0.0.1", 0, backlog=1024)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(10)
        self._address = self._server.sockets[0].getsockname()[:2]
        return self

    def __exit__(self, *exc: Any) -> None:
        loop = self._loop
        if loop is None:
            return

        async def stop() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]  # open connections
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(10)
            loop.close()
            self._store.close()
            self._loop = None


def http_storage_options() -> dict[str, Any]:
    """fsspec http options for the store: bounded time per request, no compression."""
    import aiohttp
    import fsspec.implementations.http  # noqa: F401  (so callers' timings exclude the import)

    return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=120, sock_connect=10)},
            "headers": {"Accept-Encoding": "identity"}}


def fetch_counts(counts_url: str) -> dict[str, int]:
    """The store's counts as :meth:`LatencyStore.counts` returns them, over HTTP (its own connection)."""
    from urllib.request import urlopen

    with urlopen(counts_url, timeout=10) as r:
        return json.loads(r.read())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder")
    p.add_argument("--latency-ms", type=float, default=30.0)
    p.add_argument("--bandwidth-mbs", type=float, default=50.0)
    a = p.parse_args()
    with LatencyStore(a.folder, a.latency_ms / 1000, a.bandwidth_mbs * 1e6) as store:
        print(f"serving {os.path.abspath(a.folder)} at {store.base} (Ctrl-C to stop)")
        try:
            while True:
                time.sleep(5)
                print(store.counts())
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
