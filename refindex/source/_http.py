"""HTTP(S) requests made a few at a time, through the standard library.

Opening an indexed file on the h5py road makes two requests: the index, and the freshness
check of its source; scanning a small file a handful more.  fsspec's HTTP filesystem would
make them as well, but it needs aiohttp, whose import alone (about 0.2 s) is longer than
those round trips.  So they go through :class:`QuickHTTP`: ``http.client``, a connection
kept per host, up to :data:`MANY` ranges side by side in threads (a few dozen when they are
large: a whole small file in parts).  A larger batch of small ranges (the levels of a big
chunk index, thousands of nodes) is handed to fsspec's event loop (:meth:`QuickHTTP.for_many`).

It answers as fsspec's HTTP filesystem does, so callers need not know which one they have:
``info`` tries HEAD then GET and reports ``size``, ``ETag``, ``Last-Modified``, the final
``url``; a 404 is ``FileNotFoundError``; redirects are followed; a server that ignores Range
sends the whole file (callers cut it, :func:`~refindex.source.ranged`).  Where the size and
validators are wanted with some bytes, a HEAD goes beside the ranges (a scan records what it
answers); a caller that can do without validators (a freshness check that reads the whole file,
whose bytes settle it) reads the size off the ranges' own answers instead: one request.  It is used only
for storage options it honours (:data:`HONOURED`: ``headers``, and options that only shape
fsspec's caching); anything else (``client_kwargs``: auth, timeouts, proxies) goes to fsspec.
"""

from __future__ import annotations

import encodings.idna  # noqa: F401 - see below
import http.client
import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple
from urllib.parse import quote, urljoin, urlsplit

HONOURED = frozenset({"headers", "block_size", "cache_type", "cache_options", "simple_links", "same_scheme",
                      "skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths"})
MANY = 16  # ranges fetched side by side in threads; a larger batch goes to fsspec's event loop
# ... unless its ranges are large: then what a request costs in Python does not matter, and a
# few dozen of them (a whole small file in parts) need not import aiohttp (~0.3 s with its SSL set-up)
LARGE_PART = 256 << 10
LARGE_MANY = 64
COMPRESSED = ("gzip", "x-gzip", "deflate")  # content codings refindex decodes (as aiohttp does)
PEEK_BYTES = 16 << 10  # the head of a body :meth:`QuickHTTP.cat_file_peeked` shows before the rest has arrived
REDIRECTS = {301, 302, 303, 307, 308}
MAX_REDIRECTS = 10
TIMEOUT = 60.0  # seconds without a byte from the server: the request fails (and is retried as transient)
SAFE_PATH = "/%:@!$&'()*+,;=-._~"
SAFE_QUERY = SAFE_PATH + "?"
# (encodings.idna: socket.getaddrinfo and ssl encode every host name with it.  Loaded by a request's
# thread on the first connection, it took 9 ms there, beside the caller's thread loading refindex's
# modules; here it takes 2 ms before the first request leaves.)


class Answer(NamedTuple):
    """A server's answer to one request (after redirects)."""

    headers: http.client.HTTPMessage
    body: bytes
    url: str  # where it was found
    status: int


class HTTPStatusError(OSError):
    """A request the server answered with an error status (``status``); 404 is ``FileNotFoundError``."""

    def __init__(self, status: int, url: str, reason: str = ""):
        super().__init__(f"HTTP {status} {reason}".rstrip() + f" for {url}")
        self.status = status
        self.url = url


def honours(url: str, storage_options: dict[str, Any] | None) -> bool:
    """Can :class:`QuickHTTP` make requests to ``url`` as fsspec would with these options?  (HTTP(S)
    only, and not with ``user:password@`` in the URL, which aiohttp sends as basic auth.)"""
    so = storage_options or {}
    scheme, _, rest = url.partition("://")
    return (scheme.lower() in ("http", "https") and "@" not in rest.split("/", 1)[0]
            and set(so) <= HONOURED and isinstance(so.get("headers", {}), dict))


class QuickHTTP:
    """``info``, ``cat_file``, ``cat_ranges``, ``exists``, ``size`` of HTTP(S) URLs, as fsspec's are."""

    protocol = ("http", "https")
    async_impl = False

    def __init__(self, headers: dict[str, str] | None = None, timeout: float = TIMEOUT,
                 options: dict[str, Any] | None = None):
        self.headers = {str(k): str(v) for k, v in (headers or {}).items()}
        self.timeout = timeout
        self.options = dict(options or {"headers": self.headers})  # what fsspec gets for a large batch
        self._bulk: Any = None
        self._idle: dict[tuple[str, str], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pid = os.getpid()
        self._tls: Any = None  # one ssl.SSLContext for every HTTPS connection (made on the first)
        self._parts_seen: set[str] = set()  # URLs whose server answered a range with a part (206)

    # ---------------------------------------------------------------- fsspec's calls
    def info(self, url: str, **_: Any) -> dict[str, Any]:
        """Size and validators: HEAD, else GET (a URL signed for GET only refuses HEAD), as fsspec does."""
        out: dict[str, Any] = {}
        for method in ("HEAD", "GET"):
            try:
                answer = self._request(method, url, {"Accept-Encoding": "identity"}, body=False)
                out.update(_described(answer.headers, answer.url))
                if out.get("size") is not None:
                    break
            except Exception as e:
                if method == "GET":
                    raise FileNotFoundError(url) from e
        return {"name": url, "size": None, **out, "type": "file"}

    def size(self, url: str) -> int | None:
        return self.info(url).get("size")

    def exists(self, url: str) -> bool:
        try:
            self.info(url)
            return True
        except Exception:  # noqa: BLE001 - fsspec's answer: anything but an answer is "no"
            return False

    def cat_file(self, url: str, start: int | None = None, end: int | None = None, **_: Any) -> bytes:
        """The file's bytes ``start:end`` (all of them without either)."""
        if start is not None or end is not None:
            if start == end:
                return b""
            return self._part(url, start, end)[1]
        return self._request("GET", url, self._whole())[1]

    def cat_file_peeked(self, url: str, peek: Callable[[bytes, int | None], None]) -> bytes:
        """The whole file, as :meth:`cat_file`; ``peek(first bytes, Content-Length)`` is called as
        soon as its first :data:`PEEK_BYTES` have arrived (decoded), while the rest travels: an open
        can act on the head of a large index (ask its source) before the index is all here."""
        return self._request("GET", url, self._whole(), peek=peek)[1]

    def _whole(self) -> dict[str, str]:
        """The headers a whole file is asked with: compressed where the server can (as aiohttp asks:
        a JSON index travels compressed), unless the caller's headers say otherwise."""
        if any(k.lower() == "accept-encoding" for k in self.headers):
            return {}
        return {"Accept-Encoding": "gzip, deflate"}

    def for_many(self, n: int, nbytes: int = 0) -> Any:
        """The filesystem for a batch of ``n`` ranges of ``nbytes`` in all: this one up to :data:`MANY`
        (or :data:`LARGE_MANY` of :data:`LARGE_PART` bytes on average), else fsspec's HTTP filesystem
        with the same options (made, and aiohttp imported, at the first such batch)."""
        if n <= MANY or (n <= LARGE_MANY and nbytes >= n * LARGE_PART):
            return self
        if self._bulk is None:
            import fsspec

            self._bulk = fsspec.filesystem("http", **self.options)
        return self._bulk

    def cat_ranges(self, paths: list[str], starts: list[int], ends: list[int | None], on_error: str = "raise",
                   **_: Any) -> list[Any]:
        """Several ranges at once, each on its own connection (one round trip)."""
        if len(paths) > MANY:
            known = all(a is not None and b is not None and a >= 0 for a, b in zip(starts, ends))
            bulk = self.for_many(len(paths), sum(b - a for a, b in zip(starts, ends)) if known else 0)
            if bulk is not self:
                return bulk.cat_ranges(paths, starts, ends, on_error=on_error)

        return self._side_by_side(lambda i: self.cat_file(paths[i], starts[i], ends[i]), range(len(paths)),
                                  errors_returned=on_error == "return")

    def info_and_ranges(self, url: str, spans: list[tuple[int, int | None]], head: bool = True) -> list[Any]:
        """``[info, bytes of each span...]`` in one round trip (a failed range: its exception; a
        negative start without an end: the file's last bytes).  ``head=False``: no HEAD beside the
        ranges, the info is read off their answers (the size in ``Content-Range``; the ETag, and
        Last-Modified, which HTTP lets a part leave out): one request fewer, for a caller that can
        do without validators; a HEAD follows only when no answer tells the size.  (A batch of more
        than :data:`MANY` may go to fsspec: its info is asked beside it.)"""
        if head or len(spans) > MANY:
            info = self._threads().submit(self.info, url)
            datas = self.cat_ranges([url] * len(spans), [a for a, _ in spans], [b for _, b in spans],
                                    on_error="return")
            return [info.result(), *datas]
        answers = self._side_by_side(lambda span: self._part(url, *span), spans, errors_returned=True)
        info = next((i for i in (_part_info(a) for a in answers if isinstance(a, Answer))
                     if i.get("size") is not None), None)
        return [info or self.info(url), *(a.body if isinstance(a, Answer) else a for a in answers)]

    # ---------------------------------------------------------------- requests
    def _side_by_side(self, call: Callable[[Any], Any], items: Iterable[Any], errors_returned: bool) -> list[Any]:
        """``call(item)`` for each item, in threads when there are several (one round trip); a failed
        one's exception in its place with ``errors_returned``, else raised."""
        def one(item: Any) -> Any:
            try:
                return call(item)
            except Exception as e:
                if errors_returned:
                    return e
                raise

        items = list(items)
        return [one(i) for i in items] if len(items) <= 1 else list(self._threads().map(one, items))

    def _part(self, url: str, start: int | None, end: int | None) -> Answer:
        """The answer to one range."""
        extra = {"Range": _range(start, end), "Accept-Encoding": "identity"}
        answer = self._request("GET", url, extra)
        if answer.status == 206:
            self._parts_seen.add(url)
        return answer

    def served_a_part(self, url: str) -> bool:
        """Has the server of ``url`` answered a range request with a part (206), so it serves ranges?
        (False says nothing: a range that covers a whole small file may come back as the file, 200.)"""
        return url in self._parts_seen

    def _threads(self) -> ThreadPoolExecutor:
        self._after_fork()
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(MANY, thread_name_prefix="refindex-http")
            return self._pool

    def _after_fork(self) -> None:
        """In a forked process the kept connections are the parent's sockets and the pool's threads
        are gone: both are left behind (closing a socket here leaves the parent's open)."""
        if os.getpid() != self._pid:
            self._pid, self._idle, self._pool, self._lock = os.getpid(), {}, None, threading.Lock()

    def _request(self, method: str, url: str, extra: dict[str, str], body: bool = True,
                 peek: Callable[[bytes, int | None], None] | None = None) -> Answer:
        """The answer to ``method url``, redirects followed; errors raised as fsspec's (``peek``: see
        :meth:`cat_file_peeked`)."""
        headers = {**self.headers, **extra}
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            resp, conn = self._send(method, parts, headers)
            status = resp.status
            if status in REDIRECTS and resp.getheader("Location"):
                resp.read()
                self._release(parts, conn, resp)
                target = urljoin(url, resp.getheader("Location"))
                if urlsplit(target).netloc != parts.netloc:  # credentials stay with the host they were meant for
                    headers = {k: v for k, v in headers.items() if k.lower() not in ("authorization", "cookie")}
                url = target
                continue
            if status >= 400:
                resp.read()
                self._release(parts, conn, resp)
                if status == 404:
                    raise FileNotFoundError(url)
                raise HTTPStatusError(status, url, resp.reason)
            if not body and method == "GET":  # headers were all that was asked: the body is not read
                conn.close()
                return Answer(resp.headers, b"", url, status)
            encoding = resp.getheader("Content-Encoding")
            data = resp.read() if peek is None else _peeked(resp, encoding, peek)
            self._release(parts, conn, resp)
            return Answer(resp.headers, _decoded(data, encoding, url), url, status)
        raise HTTPStatusError(310, url, f"more than {MAX_REDIRECTS} redirects")

    def _send(self, method: str, parts: Any, headers: dict[str, str]) -> tuple[http.client.HTTPResponse, Any]:
        target = quote(parts.path or "/", safe=SAFE_PATH) + (f"?{quote(parts.query, safe=SAFE_QUERY)}"
                                                              if parts.query else "")
        for attempt in (0, 1):
            conn, reused = self._connection(parts, fresh=attempt > 0)
            try:
                conn.request(method, target, headers=headers)
                return conn.getresponse(), conn
            except OSError as e:
                conn.close()
                if reused and isinstance(e, (ConnectionResetError, BrokenPipeError)):  # (RemoteDisconnected too)
                    # a kept connection the server closed while it waited (servers let idle ones go after
                    # some seconds): the others kept for that host waited as long, so they go too, and
                    # the request is made once more on a new connection
                    self._forget(parts)
                    continue
                e.server = f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
                raise  # (the server named in the error: refindex.source.reason_of)
            except Exception:
                conn.close()
                raise
        raise AssertionError("unreachable")

    def _connection(self, parts: Any, fresh: bool = False) -> tuple[http.client.HTTPConnection, bool]:
        self._after_fork()
        key = (parts.scheme, parts.netloc)
        with self._lock:
            idle = self._idle.get(key)
            if idle and not fresh:
                return idle.pop(), True
        if parts.scheme == "https":
            return http.client.HTTPSConnection(parts.hostname, parts.port, timeout=self.timeout,
                                               context=self._tls_context()), False
        if parts.scheme != "http":
            raise ValueError(f"not an HTTP URL: {parts.geturl()}")
        return http.client.HTTPConnection(parts.hostname, parts.port, timeout=self.timeout), False

    def _tls_context(self) -> Any:
        """The TLS settings every HTTPS connection shares: making them loads the system's certificates
        (45 ms for a 220 KB bundle here), which ``http.client`` otherwise does for each new connection."""
        with self._lock:
            if self._tls is None:
                import ssl

                self._tls = ssl.create_default_context()
            return self._tls

    def _forget(self, parts: Any) -> None:
        with self._lock:
            stale = self._idle.pop((parts.scheme, parts.netloc), [])
        for conn in stale:
            conn.close()

    def _release(self, parts: Any, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        if resp.will_close:
            conn.close()
            return
        with self._lock:
            self._idle.setdefault((parts.scheme, parts.netloc), []).append(conn)

    def close(self) -> None:
        with self._lock:
            for conns in self._idle.values():
                for c in conns:
                    c.close()
            self._idle.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False)


def _range(start: int | None, end: int | None) -> str:
    if start is not None and start < 0:
        return f"bytes={start}" if end is None else f"bytes={start}-{end - 1}"  # a suffix: the last bytes
    return f"bytes={start or 0}-" + ("" if end is None else str(end - 1))


def _described(headers: http.client.HTTPMessage, url: str) -> dict[str, Any]:
    """fsspec's ``info`` fields from a response's headers."""
    out: dict[str, Any] = {}
    length, encoding = headers.get("Content-Length"), headers.get("Content-Encoding")
    if length is not None and encoding in (None, "", "identity"):
        out["size"] = int(length)
    elif headers.get("Content-Range"):
        total = headers["Content-Range"].rpartition("/")[2]
        if total.isdigit():
            out["size"] = int(total)
    if headers.get("Content-Type"):
        out["mimetype"] = headers["Content-Type"].partition(";")[0]
    if headers.get("Accept-Ranges") == "none":
        out["partial"] = False
    out["url"] = url
    for name in ("ETag", "Content-MD5", "Digest", "Last-Modified"):
        if headers.get(name):
            out[name] = headers[name]
    return out


def _part_info(answer: Answer) -> dict[str, Any]:
    """:meth:`QuickHTTP.info` from a range's answer: the file's size is the total in its
    ``Content-Range`` (none when the server does not say it); a server that ignored Range sent
    the whole file (200), whose length is the size.  A part's own ``Content-MD5`` is left out."""
    out = {"name": answer.url, "size": None, **_described(answer.headers, answer.url), "type": "file"}
    out.pop("Content-MD5", None)
    if answer.status != 200:
        total = (answer.headers.get("Content-Range") or "").rpartition("/")[2].strip()
        out["size"] = int(total) if total.isdigit() else None
    return out


def _peeked(resp: http.client.HTTPResponse, encoding: str | None, peek: Callable[[bytes, int | None], None]) -> bytes:
    """A body read whole, ``peek`` shown its first bytes (decoded as far as they go) on the way."""
    head = resp.read(PEEK_BYTES)
    try:
        shown = head
        if _coding(encoding) in COMPRESSED:
            shown = zlib.decompressobj(47).decompress(head)
        length = resp.getheader("Content-Length")
        peek(shown, int(length) if length and length.isdigit() else None)
    except Exception:  # noqa: BLE001 - a peek only starts something early; the body is what counts
        pass
    return head + resp.read()


def _coding(encoding: str | None) -> str:
    """A ``Content-Encoding`` header as compared: trimmed, lower case, empty when absent."""
    return (encoding or "").strip().lower()


def _decoded(data: bytes, encoding: str | None, url: str) -> bytes:
    """A body as sent with ``Content-Encoding`` gzip or deflate, decoded (as aiohttp does)."""
    enc = _coding(encoding)
    if enc in ("", "identity"):
        return data
    if enc in COMPRESSED:
        try:
            return zlib.decompress(data, 47)  # gzip or zlib header, detected
        except zlib.error:
            return zlib.decompress(data, -15)  # raw deflate
    raise HTTPStatusError(415, url, f"(the server sent content encoding {encoding!r}, which refindex cannot decode)")
