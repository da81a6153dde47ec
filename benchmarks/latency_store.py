"""A loopback object store with the round-trip cost of a real one.

A small threaded HTTP server on 127.0.0.1 serving one directory with ``Range`` support.
Every request waits ``latency`` before its headers and sends its body at ``bandwidth``
(per connection); the server counts requests and bytes, so benchmarks can report what a
reader fetched.
``GET /_store/counts`` returns those counts as JSON (neither counted nor delayed), so a
reader in another process can tell what each of its own steps fetched.
fsspec's ``http`` filesystem reads it like any web server or presigned S3 URL.

Run alone to serve a folder:  python benchmarks/latency_store.py benchmarks/out
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
COUNTS_PATH = "/_store/counts"
PIECE = 256 << 10  # bytes written (and paced) at a time


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as object stores do
    timeout = 30  # a stuck client cannot hold a thread forever
    # Headers and body go out in two writes; with Nagle's algorithm the body waits for the
    # client's delayed ACK of the headers (40 ms on Linux), so every request cost ~70 ms, not 30.
    disable_nagle_algorithm = True
    server: "_Server"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _resolve(self) -> str | None:
        rel = self.path.split("?", 1)[0].lstrip("/")
        full = os.path.realpath(os.path.join(self.server.root, rel))
        if not full.startswith(self.server.root + os.sep) or not os.path.isfile(full):
            return None
        return full

    def _fail(self, code: int) -> None:
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:
        self.server.count(0, head=True)
        self._wait()
        full = self._resolve()
        if full is None:
            return self._fail(404)
        self.send_response(200)
        self.send_header("Content-Length", str(os.path.getsize(full)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{int(os.path.getmtime(full))}-{os.path.getsize(full)}"')
        self.end_headers()

    def do_GET(self) -> None:
        if self.path == COUNTS_PATH:
            return self._send_counts()
        full = self._resolve()
        if full is None:
            self.server.count(0)
            return self._fail(404)
        size = os.path.getsize(full)
        start, end, status = 0, size, 200
        rng = self.headers.get("Range")
        if rng:
            m = _RANGE.match(rng.strip())
            if not m or (not m.group(1) and not m.group(2)):
                self.server.count(0)
                return self._fail(416)
            if m.group(1):
                start = int(m.group(1))
                end = min(size, int(m.group(2)) + 1) if m.group(2) else size
            else:  # suffix range: last N bytes
                start = max(0, size - int(m.group(2)))
            if start >= size or end <= start:
                self.server.count(0)
                return self._fail(416)
            status = 206
        self.server.count(0)
        self._wait()
        self.send_response(status)
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        self._send_body(full, start, end - start)

    def _send_body(self, full: str, start: int, n: int) -> None:
        """The bytes at ``bandwidth``, a piece at a time, each counted as it goes out.

        A client that hangs up early (remfile's first GET only wants Content-Length) waits
        for, and is counted for, what it took, not the whole file, as from a real store."""
        with open(full, "rb") as fh:
            fh.seek(start)
            while n > 0:
                piece = fh.read(min(n, PIECE))
                self.server.count(len(piece), request=False)
                if self.server.bandwidth:
                    time.sleep(len(piece) / self.server.bandwidth)
                self.wfile.write(piece)
                n -= len(piece)

    def _send_counts(self) -> None:
        body = json.dumps(self.server.counts()).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _wait(self) -> None:
        """The round trip before the first byte."""
        if self.server.latency > 0:
            time.sleep(self.server.latency)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops SYNs of concurrent clients: 1 s retransmit stalls

    def __init__(self, root: str, latency: float, bandwidth: float):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = os.path.realpath(root)
        self.latency = latency
        self.bandwidth = bandwidth
        self.requests = 0
        self.head_requests = 0
        self.bytes_sent = 0
        self._lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-response (a reader that gave up) is no error of the store."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def count(self, nbytes: int, head: bool = False, request: bool = True) -> None:
        with self._lock:
            self.requests += int(request)
            self.head_requests += int(head)
            self.bytes_sent += nbytes

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"requests": self.requests, "head_requests": self.head_requests, "bytes": self.bytes_sent}


class LatencyStore:
    """``with LatencyStore(folder) as store: store.url("f.nwb")`` -> an http:// URL on 127.0.0.1.

    ``latency``: seconds added to every request; ``bandwidth``: bytes/second per
    connection.  ``store.reset()`` zeroes the counters, ``store.counts()`` reads them.
    """

    def __init__(self, root: str | os.PathLike, latency: float = 0.030, bandwidth: float = 50e6):
        self._server = _Server(os.fspath(root), latency, bandwidth)
        self._thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def reset(self) -> None:
        with self._server._lock:
            self._server.requests = self._server.head_requests = self._server.bytes_sent = 0

    def counts(self) -> dict[str, int]:
        return self._server.counts()

    @property
    def counts_url(self) -> str:
        """Where :func:`fetch_counts` reads :meth:`counts` from another process."""
        return self.base + COUNTS_PATH

    def __enter__(self) -> "LatencyStore":
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


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
