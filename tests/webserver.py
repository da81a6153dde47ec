"""A loopback HTTP server for tests, shaped like the servers users meet.

``serve(etag=..., last_modified=..., ranges=...)`` serves files held in memory (``server.put(name,
data)``), with or without an ``ETag`` (derived from the file's mtime and size, as nginx and Apache
make theirs), a ``Last-Modified`` header (whole seconds, as HTTP dates are) and Range support
(``python -m http.server`` has none). ``delay`` holds every answer back (a slow server); ``idle``
closes a kept connection that waits longer than that for its next request (as nginx and object
stores do); ``tls`` serves HTTPS (with a certificate of :func:`self_signed`); ``server.requests``
logs (method, path, Range), ``server.sent`` the body bytes of each answer. A name can also be
answered with a redirect (``server.redirects``), an error status (``server.statuses``) or a body
stored gzip-compressed (``put(..., gzip=True)``: sent with ``Content-Encoding``); a range can be
held back until the test lets it go (``server.held[(name, start)] = threading.Event()``), and a
whole body paused after its first bytes (``server.paused[name] = (nbytes, threading.Event())``).
``host``: another loopback address to listen on (127.0.0.2: a host other than 127.0.0.1).
``server.failures`` answers the next N requests 503 and ``server.failing_ranges`` a given (start,
end) once (servers that fail and recover); ``server.peak`` is the most requests answered at once,
``server.connections`` how many connections are open now; ``server.watched[(method, name)] =
threading.Event()`` is set when such a request comes (name None: any), and ``server.waiting[(method,
name)] = threading.Event()`` holds such a request back until the test lets it go. This is the suite's one HTTP
server: a test that needs another behaviour adds it here.
"""

from __future__ import annotations

import contextlib
import email.utils
import http.server
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator


@dataclass
class Served:
    data: bytes
    mtime: float
    encoding: str | None = None
    tag: str | None = None  # the ETag's text, where not made from the whole-second mtime and size


@dataclass
class Server:
    base: str
    files: dict[str, Served] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    redirects: dict[str, str] = field(default_factory=dict)  # name -> the URL a 302 points to
    statuses: dict[str, int] = field(default_factory=dict)  # name -> the error status it answers
    held: dict[tuple[str, int], threading.Event] = field(default_factory=dict)  # (name, range start) -> go
    paused: dict[str, tuple[int, threading.Event]] = field(default_factory=dict)  # name -> (bytes sent first, go)
    failures: int = 0  # the next this many requests are answered 503 (a server that recovers, or never does)
    failing_ranges: set[tuple[int, int]] = field(default_factory=set)  # (start, end) answered 503 once each
    delay: float = 0.0  # seconds every answer is held back (set by serve(delay=...), changeable while serving)
    inflight: int = 0  # requests being answered now
    peak: int = 0  # the most requests answered at once
    lock: threading.Lock = field(default_factory=threading.Lock)
    folder: Path | None = None  # names not put here are read from this folder, as they are on disk now
    sent: list[tuple[str, str | None, int]] = field(default_factory=list)  # (path, Range, body bytes) per GET answered
    # (method, name or None for any) -> set when such a request arrives: a test waits on it, not on the log
    watched: dict[tuple[str, str | None], threading.Event] = field(default_factory=dict)
    # (method, name or None for any) -> the request is answered once it is set (at most 30 s later)
    waiting: dict[tuple[str, str | None], threading.Event] = field(default_factory=dict)
    connections: int = 0  # connections open now (a kept one counts until the server has closed it)

    def lookup(self, name: str) -> Served | None:
        """What ``name`` serves: a file put here, else the file of that name under :attr:`folder`."""
        served = self.files.get(name)
        if served is not None or self.folder is None:
            return served
        path = (self.folder / name).resolve()
        if not path.is_file() or self.folder not in path.parents:
            return None
        st = path.stat()  # the tag changes with any write, even within a second
        return Served(path.read_bytes(), st.st_mtime, tag=f"{st.st_mtime_ns:x}-{st.st_size:x}")

    def answers_unavailable(self, rng: str | None) -> bool:
        """Whether this request is one of those told to fail (and count it as failed)."""
        with self.lock:
            if self.failures > 0:
                self.failures -= 1
                return True
            span = _span(rng)
            if span in self.failing_ranges:
                self.failing_ranges.discard(span)
                return True
        return False

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def put(self, name: str, data: bytes, mtime: float | None = None, gzip: bool = False) -> str:
        """Serve ``data`` as ``name`` (modified now, or at ``mtime``; stored gzip-compressed); returns its URL."""
        import gzip as gz

        body = gz.compress(bytes(data)) if gzip else bytes(data)
        self.files[name] = Served(body, time.time() if mtime is None else mtime, "gzip" if gzip else None)
        return self.url(name)


def _span(rng: str | None) -> tuple[int, int] | None:
    """(start, end) of a ``bytes=a-b`` Range header (end exclusive), None for anything else."""
    if not rng or not rng.startswith("bytes=") or rng.startswith("bytes=-"):
        return None
    a, _, b = rng[6:].partition("-")
    return (int(a), int(b) + 1) if b else None


def _handler(server: Server, etag: bool, last_modified: bool, ranges: bool,
             idle: float | None = None, content_range: bool = True) -> type:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = idle  # seconds a kept connection may wait for its next request before the server closes it
        disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms wait for an ACK between

        def log_message(self, *args):  # quiet
            pass

        def _send(self, head_only: bool) -> None:
            with server.lock:
                server.inflight += 1
                server.peak = max(server.peak, server.inflight)
            try:
                self._answer(head_only)
            finally:
                with server.lock:
                    server.inflight -= 1

        def _answer(self, head_only: bool) -> None:
            rng = self.headers.get("Range")
            name = self.path.lstrip("/").split("?", 1)[0]
            server.requests.append((self.command, self.path, rng))
            for key in ((self.command, name), (self.command, None)):
                if key in server.watched:
                    server.watched[key].set()
            for key in ((self.command, name), (self.command, None)):
                if key in server.waiting:
                    server.waiting[key].wait(30)
            if server.delay:
                time.sleep(server.delay)  # a slow server: this is about time
            if server.answers_unavailable(rng):
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            served = server.lookup(name)
            if name in server.redirects:
                self.send_response(302)
                self.send_header("Location", server.redirects[name])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if served is None or name in server.statuses:
                self.send_response(server.statuses.get(name, 404))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data, status, part = served.data, 200, None
            if ranges and rng and rng.startswith("bytes="):
                a, _, b = rng[6:].partition("-")
                if a:
                    start, end = int(a), min(len(data), int(b) + 1 if b else len(data))
                else:  # a suffix range: the last b bytes
                    start, end = max(0, len(data) - int(b)), len(data)
                if start >= end:  # nothing of the file lies there: unsatisfiable, as HTTP says
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data, status, part = data[start:end], 206, f"bytes {start}-{end - 1}/{len(data)}"
                if (name, start) in server.held:
                    server.held[(name, start)].wait(30)
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            if part and content_range:
                self.send_header("Content-Range", part)
            if ranges:
                self.send_header("Accept-Ranges", "bytes")
            if etag:
                self.send_header("ETag", f'"{served.tag or f"{int(served.mtime):x}-{len(served.data):x}"}"')
            if last_modified:
                self.send_header("Last-Modified", email.utils.formatdate(served.mtime, usegmt=True))
            if served.encoding:
                self.send_header("Content-Encoding", served.encoding)
            self.end_headers()
            if not head_only:
                server.sent.append((self.path, rng, len(data)))
                pause = server.paused.get(name)
                if pause is not None and status == 200 and len(data) > pause[0]:
                    self.wfile.write(data[: pause[0]])
                    self.wfile.flush()
                    pause[1].wait(30)
                    data = data[pause[0]:]
                self.wfile.write(data)

        def do_GET(self):
            self._send(False)

        def do_HEAD(self):
            self._send(True)

    return Handler


class LoopbackHTTPServer(http.server.ThreadingHTTPServer):
    """The suite's loopback servers: threads, and a listen queue for a client's burst of connections."""

    request_queue_size = 256  # (socketserver's 5 drops the SYNs of a client opening 128 connections at once:
    #                            it retries them 1, 3, 7 s later, and a test takes seconds for nothing)
    served: Server | None = None  # whose ``connections`` count this server's open connections

    def process_request(self, request, client_address):
        if self.served is not None:
            with self.served.lock:
                self.served.connections += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        super().shutdown_request(request)  # closed: only now does the client see the connection end
        if self.served is not None:
            with self.served.lock:
                self.served.connections -= 1


def self_signed(folder: str) -> tuple[str, str]:
    """(certificate, key) files of a certificate for 127.0.0.1 signed by itself: a client trusts it
    with ``SSL_CERT_FILE`` set to the certificate."""
    import datetime
    import ipaddress
    import os

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    with open(cert_file, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_file, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    return cert_file, key_file


@contextlib.contextmanager
def serve(*, etag: bool = True, last_modified: bool = True, ranges: bool = True, content_range: bool = True,
          delay: float = 0.0, idle: float | None = None, tls: tuple[str, str] | None = None,
          host: str = "127.0.0.1", folder: str | Path | None = None) -> Iterator[Server]:
    """A running server on 127.0.0.1 (stopped on exit); ``tls``: (certificate, key) files, for HTTPS
    (:func:`self_signed`); ``content_range=False``: a part is sent without saying where it lies in
    the file or how long the file is (a server that breaks HTTP's rule); ``folder``: also serve the
    files under it, as they are on disk at each request."""
    server = Server(base="", delay=delay, folder=None if folder is None else Path(folder).resolve())
    httpd = LoopbackHTTPServer((host, 0), _handler(server, etag, last_modified, ranges, idle, content_range))
    httpd.daemon_threads = True
    httpd.served = server
    if tls is not None:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    server.base = f"{'https' if tls else 'http'}://{host}:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
