"""What went wrong reaching a file, in the user's words.

fsspec turns most failures into ``FileNotFoundError`` (its HTTP backend: a refused
connection, a DNS failure and a 403 alike) and keeps the real cause in the exception's
chain; botocore says "Unable to locate credentials" without a word about where refindex
takes them from.  :func:`source_error` reads the chain and says the cause and the fix.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from ..errors import SourceError

CREDENTIALS_HINT = ("pass remote_options (reading an index: the files its chunks live in) or storage_options "
                    "(scanning, or reading the index itself), e.g. {\"anon\": true} for a public bucket or "
                    "{\"key\": ..., \"secret\": ...}; on the command line --storage-options '{\"anon\": true}'")


def _chain(e: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    while e is not None and e not in out and len(out) < 16:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _host_of(exc: Any) -> str | None:
    if isinstance(getattr(exc, "server", None), str):  # refindex's own HTTP requests (source._http)
        return exc.server
    key = getattr(exc, "_conn_key", None) or getattr(exc, "conn_key", None)
    host, port = getattr(key, "host", None), getattr(key, "port", None)
    return f"{host}:{port}" if host else None


def reason_of(e: BaseException) -> str | None:
    """The cause of a failure to reach a file, as a sentence with its fix (None: nothing better is known)."""
    chain = _chain(e)
    names = {type(c).__name__ for c in chain}
    host = next((h for h in map(_host_of, chain) if h), None)
    where = f" to {host}" if host else ""
    if "NoCredentialsError" in names or "PartialCredentialsError" in names:
        return f"no S3 credentials found ({chain[-1]}): {CREDENTIALS_HINT}"
    if any(isinstance(c, ConnectionRefusedError) for c in chain):
        return f"cannot connect{where} (connection refused): is the server running and the URL right?"
    if any(isinstance(c, socket.gaierror) for c in chain) or "ClientConnectorDNSError" in names:
        return f"cannot connect{where}: the host name does not resolve (check the URL and the network)"
    # (by name: ``ssl`` takes 24 ms to import, and a reader of plain HTTP never needs it)
    untrusted = next((c for c in chain if type(c).__name__ == "SSLCertVerificationError"), None)
    if untrusted is not None or "ClientConnectorCertificateError" in names:
        why = getattr(untrusted, "verify_message", None) or (untrusted or chain[-1])
        return (f"cannot connect{where}: its TLS certificate is not trusted here ({why}); if the server is the "
                "right one, point SSL_CERT_FILE at a certificate bundle that holds its issuer")
    if any(k.__name__ in ("SSLError", "ClientSSLError") for c in chain for k in type(c).__mro__):
        return f"cannot connect{where}: the TLS connection failed ({chain[-1]})"
    if any(type(c).__name__ == "ClientConnectorError" for c in chain):
        return f"cannot connect{where} ({chain[-1]})"
    status = next((getattr(c, "status", None) for c in chain
                   if type(c).__name__ in ("ClientResponseError", "HTTPStatusError")), None)
    if status in (401, 403):
        return f"the server refused access (HTTP {status}): the URL may need credentials or a signed link"
    if any(isinstance(c, (TimeoutError, asyncio.TimeoutError)) for c in chain):
        return "timed out waiting for the server"
    if "AccessDenied" in " ".join(str(c) for c in chain) or any(isinstance(c, PermissionError) for c in chain):
        return f"permission denied ({chain[0]})"
    return None


def source_error(e: BaseException, url: str, doing: str = "could not stat file") -> SourceError:
    """A one-line :class:`SourceError` for a failure to reach ``url`` (``doing``: what was tried)."""
    said = reason_of(e)
    if said is not None:
        return SourceError(said, file=url)
    if isinstance(e, FileNotFoundError):
        return SourceError("file not found", file=url)
    return SourceError(f"{doing}: {e}", file=url)


WHOLE_FILE_FALLBACK = 64 << 20  # a server that ignores Range requests: files up to this size are read whole
NO_RANGES = ("the server does not support range requests (asked for bytes {a}-{b}, it sent {n} bytes)")


def no_ranges(start: int, end: int, sent: int, url: str) -> SourceError:
    """The error of a read that a server ignoring Range answered with a file too large to cut ranges from."""
    return SourceError(NO_RANGES.format(a=start, b=end, n=sent) + ": refindex reads remote files in ranges; "
                       f"files over {WHOLE_FILE_FALLBACK >> 20} MiB need a server that supports them (nginx, "
                       "Apache, S3 and most object stores do), or copy the file here and index the copy", file=url)


def ranged(data: bytes, start: int, end: int, url: str) -> bytes:
    """Bytes ``start:end`` of the answer ``data`` to a request for that range.

    A server that ignores the Range header (``python -m http.server``, some proxies) sends
    the whole file: of a file up to :data:`WHOLE_FILE_FALLBACK` bytes the range is cut from
    it; a larger one is refused, naming the cause.  An answer shorter than the range means
    the file is shorter than expected.
    """
    if len(data) == end - start:
        return data
    if len(data) > end - start:
        if end <= len(data) <= WHOLE_FILE_FALLBACK:
            return data[start:end]
        raise no_ranges(start, end, len(data), url)
    raise SourceError(f"the file ended early: asked for bytes {start}-{end}, got {len(data)} (it is shorter than "
                      "expected: changed or truncated since it was indexed?)", file=url)


def too_large_whole(size: int) -> bool:
    """Is a file of ``size`` bytes too large to be read whole from a server that ignores Range requests?"""
    return size > WHOLE_FILE_FALLBACK


def whole_file(data: bytes, start: int, end: int) -> bool:
    """Is ``data``, the answer to a request for ``start:end``, the whole file instead (Range ignored)?"""
    return len(data) != end - start and end <= len(data) <= WHOLE_FILE_FALLBACK
