"""Which URLs an index may make its reader fetch (issue #13: indexes you did not make).

An index is a list of URLs its reader will fetch.  One from elsewhere must not make a
service or notebook read what it has no business naming: ``/etc/passwd``,
``~/.aws/credentials``, the cloud metadata endpoint, a host on the reader's own network.
:class:`UrlPolicy` judges one URL at a time (verdicts are kept, so an index with a few
distinct URLs costs a few judgements however many keys it has); ``_urlcheck`` applies
it to whole indexes.  The rules, by where the index itself lives:

====================  ======================  ==================  ================  ==============
URL named             remote index            local index file    dict in memory    rule
====================  ======================  ==================  ================  ==============
local file            refused                 inside the index's  HDF5 files and    symlinks and
(path, ``file://``)                           folder, HDF5 files  files beside a    ``..`` resolved
                                              and files beside a  named HDF5 file   first
                                              named HDF5 file
``~/...``             refused                 refused             refused           never expanded
loopback, private     refused, unless the     allowed             allowed           by address,
host                  index's own host                                              any spelling
link-local, cloud     refused, unless the     refused             refused           names resolved
metadata host         index's own host                                              once (DNS)
public host,          allowed                 allowed             allowed
s3/gs/az bucket
``memory://``         refused                 allowed             allowed
chained (``a::b``),   refused                 refused             refused
other protocols
====================  ======================  ==================  ================  ==============

"Inside" a folder and "beside" a file mean in that folder or below, with no hidden
(``.name``) folder or file on the way down, so a folder that holds data does not also hand
out ``.ssh``, ``.aws`` or ``.netrc``.  A local file that does not exist is not refused
(there is nothing to read; the read fails as "file not found").  ``data:`` URLs carry
their bytes and are allowed.  An index that declares its sources (``templates``, the
provenance ``refindex.source.url``, the ``url`` of its external files) may name only URLs
at or beside them; the declared sources pass the same rules (the provenance source when
the freshness check will ask it, an external file's ``url`` when a link leads to it).  ``allowed`` (URL prefixes ending at a ``/``,
``?``, ``#`` or ``:``, or patterns where ``*`` stands for anything) passes a URL whatever
the rules say; ``trust=True`` passes everything.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat as stat_mod
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from ...source import has_hdf5_signature
from ._hosts import DESCRIBED, LINK_LOCAL, PUBLIC, name_kind, normalise_host, resolve, same_host, worst_address

IN_MEMORY, LOCAL, REMOTE = "in memory", "local", "remote"
LOCAL_PROTOCOLS = frozenset({None, "file", "local"})
HOST_PROTOCOLS = frozenset({"http", "https"})
# Buckets, not hosts: which endpoint serves them is the reader's choice (its remote_options).
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl"})
_FILE_PREFIXES = ("file://", "local://", "file:", "local:")  # what fsspec's local filesystem strips


def allowed_patterns(allowed: Sequence[str] | str | None) -> tuple[str, ...]:
    """A caller's ``allowed_urls`` (one prefix or pattern, several, or None) as the policy takes them."""
    return (allowed,) if isinstance(allowed, str) else tuple(allowed or ())


def split_protocol(url: str) -> tuple[str | None, str]:
    """(protocol in lower case or None, rest) the way fsspec splits a URL (``data:`` included)."""
    if "://" in url:
        protocol, rest = url.split("://", 1)
        if len(protocol) > 1:  # "c://" is a Windows drive
            return protocol.lower(), rest
    if url[:5].lower() == "data:":
        return "data", url[5:]
    return None, url


def local_paths(url: str) -> list[str] | None:
    """Every absolute path a reader may open for a local ``url`` (None: a ``~`` path).

    refindex's store opens the path after the protocol as written; fsspec's local
    filesystem (parquet indexes) also strips a bare ``file:`` and expands ``~``.
    """
    protocol, rest = split_protocol(url)
    plain = rest if protocol else url
    stripped = url
    for prefix in _FILE_PREFIXES:
        if url[:len(prefix)].lower() == prefix:
            stripped = url[len(prefix):]
            break
    if plain.startswith("~") or stripped.startswith("~"):
        return None
    return sorted({os.path.abspath(plain), os.path.abspath(stripped)})


def is_hdf5_file(path: str) -> bool:
    """A regular file with an HDF5 signature where libhdf5 looks (never blocks on a FIFO or device)."""
    try:
        st = os.stat(path)
        if not stat_mod.S_ISREG(st.st_mode):
            return False
        with open(path, "rb") as fh:
            def read(off: int, n: int) -> bytes:
                fh.seek(off)
                return fh.read(n)

            return has_hdf5_signature(read, st.st_size)
    except OSError:
        return False


def visible_within(path: str, folder: str) -> bool:
    """Is ``path`` ``folder`` or below it, with no hidden name (``.ssh``, ``.netrc``) on the way down?"""
    rel = os.path.relpath(path, folder)
    if rel == ".":
        return True
    parts = rel.split(os.sep)
    return parts[0] != ".." and not any(p.startswith(".") for p in parts)


def _text_matches(url: str, pattern: str) -> bool:
    if "*" in pattern:
        return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), url, re.DOTALL) is not None
    return url == pattern or (url.startswith(pattern) and (pattern.endswith("/") or url[len(pattern)] in "/?#:"))


def without_dot_segments(url: str) -> str:
    """An HTTP URL with ``.``/``..`` path segments resolved, as the HTTP client will send it."""
    parts = urlsplit(url)
    path = posixpath.normpath(parts.path) if parts.path else ""
    path = "" if path == "." else path + ("/" if parts.path.endswith("/") and path != "/" else "")
    return parts._replace(path=path).geturl()


def pattern_matches(url: str, pattern: str) -> bool:
    """Does ``url`` fall under ``pattern``: a prefix ending at a path boundary, or, when it holds
    ``*``, a pattern where ``*`` stands for anything (every other character as itself)?

    Local URLs are compared by every path a reader may open for them, symlinks and ``..``
    resolved (a ``~`` path only as written); HTTP URLs with their dot segments resolved.
    """
    protocol = split_protocol(url)[0]
    if protocol in HOST_PROTOCOLS:
        return _text_matches(without_dot_segments(url), pattern)
    if protocol not in LOCAL_PROTOCOLS:
        return _text_matches(url, pattern)
    paths, roots = local_paths(url), local_paths(pattern)
    if paths is None or roots is None or split_protocol(pattern)[0] not in LOCAL_PROTOCOLS:
        return url == pattern
    roots = roots + [os.path.realpath(r) for r in roots]
    return all(any(_text_matches(os.path.realpath(p), r) for r in roots) for p in paths)


def source_prefix(url: str) -> tuple[str, str]:
    """(kind, prefix) under which files beside a declared source lie: its folder."""
    protocol, rest = split_protocol(url)
    if protocol in LOCAL_PROTOCOLS:
        paths = local_paths(url) or []
        return LOCAL, os.path.dirname(os.path.realpath(paths[0])) if paths else ""
    if protocol in HOST_PROTOCOLS:
        rest = without_dot_segments(url).split("://", 1)[1]
    rest = rest.split("?", 1)[0].split("#", 1)[0]
    return REMOTE, f"{protocol}://{posixpath.dirname(rest)}".rstrip("/") + "/"


class UrlPolicy:
    """Judges the URLs one index names (see the module's rule table).

    ``index``: where the index was read from (local path or URL; None: a dict made in
    memory).  ``allowed``: URL prefixes or patterns the caller allows whatever the rules;
    ``trust``: allow everything.  ``resolve_names``: ask DNS what host names are.
    """

    def __init__(self, index: str | None = None, *, allowed: Sequence[str] = (), trust: bool = False,
                 resolve_names: bool = True):
        self.index = index
        self.allowed = tuple(allowed)
        self.trust = trust
        self.resolve_names = resolve_names
        self.kind, self.folder, self.host = _locate(index)
        self._declared: list[tuple[str, str, str]] = []  # (url, kind, prefix)
        self._hdf5_folders: set[str] = set()
        self._verdicts: dict[str, str | None] = {}
        self._hosts: dict[str, tuple[str, str]] = {}  # host -> (kind, how it was found)

    # ------------------------------------------------------------------ what the index says about itself
    def declare(self, sources: Iterable[str]) -> None:
        """The files the index says its chunks come from: its URLs must lie at or beside them."""
        for url in sources:
            self._declared.append((url, *source_prefix(url)))
        self.learn(sources)

    def learn(self, named: Iterable[str]) -> None:
        """Note the local HDF5 files among URLs the index names, and ask DNS about its host names at once."""
        names: set[str] = set()
        for url in named:
            protocol, _ = split_protocol(url)
            if protocol in LOCAL_PROTOCOLS and self.kind != REMOTE:
                for path in local_paths(url) or []:
                    real = os.path.realpath(path)
                    if is_hdf5_file(real):
                        self._hdf5_folders.add(os.path.dirname(real))
            elif protocol in HOST_PROTOCOLS:
                host = _host_of(url)
                if host and host not in self._hosts and name_kind(host) is None:
                    names.add(host)
        if names and self.resolve_names:
            found = resolve(names)
            for host in names:
                self._hosts[host] = _kind_from_addresses(host, found.get(host, []))

    # ------------------------------------------------------------------ verdicts
    def refusal(self, url: str) -> str | None:
        """Why ``url`` must not be fetched; None when it may be."""
        if self.trust:
            return None
        if url not in self._verdicts:
            allowed = any(pattern_matches(url, p) for p in self.allowed)
            self._verdicts[url] = None if allowed else (self._judge(url) or self._undeclared(url))
        return self._verdicts[url]

    def _judge(self, url: str) -> str | None:
        protocol, _ = split_protocol(url)
        if "::" in (protocol or url):  # "simplecache::https://...": "::" in an IPv6 host is no chain
            return "a chained URL (fsspec's '::' caching and archive layers)"
        if protocol in LOCAL_PROTOCOLS:
            return self._local_refusal(url)
        if protocol in OBJECT_STORES or protocol == "data":  # data: the bytes are in the URL itself
            return None
        if protocol == "memory":
            return "process memory (memory://), named by a remote index" if self.kind == REMOTE else None
        if protocol in HOST_PROTOCOLS:
            return self._host_refusal(url)
        return f"the protocol {protocol!r}, which refindex does not read chunks from unless allowed"

    def _local_refusal(self, url: str) -> str | None:
        if self.kind == REMOTE:
            return "a local file, named by a remote index"
        paths = local_paths(url)
        if paths is None:
            return "a path under a home folder (~), which is never expanded unless allowed"
        for path in paths:
            real = os.path.realpath(path)
            if not os.path.exists(real):
                continue  # nothing to read: the read fails as "file not found"
            if self.folder is not None and visible_within(real, self.folder):
                continue
            if is_hdf5_file(real) or any(visible_within(real, f) for f in self._hdf5_folders):
                continue
            where = "outside the index's folder" if self.folder is not None else "in this machine's files"
            return (f"a local file {where} ({real}) that is neither an HDF5 file nor beside one the index "
                    "names (hidden folders excluded)")
        return None

    def _host_refusal(self, url: str) -> str | None:
        try:
            netloc = urlsplit(url).netloc
        except ValueError:
            return "a URL whose host cannot be read"
        host = _host_of(url)
        if not host or any(c in netloc for c in "\\%\t\r\n "):
            return "a URL whose host is malformed"
        if self.host is not None and same_host(host, self.host):
            return None
        if host not in self._hosts:
            kind = name_kind(host)
            if kind is not None:
                self._hosts[host] = (kind, "")
            else:
                found = resolve([host]) if self.resolve_names else {}
                self._hosts[host] = _kind_from_addresses(host, found.get(host, []))
        kind, how = self._hosts[host]
        if kind == PUBLIC or (self.kind != REMOTE and kind != LINK_LOCAL):
            return None
        return DESCRIBED[kind] + how

    def _undeclared(self, url: str) -> str | None:
        if not self._declared:
            return None
        kind, prefix = source_prefix(url)
        for source, skind, sprefix in self._declared:
            if url == source:
                return None
            if kind == skind == REMOTE and prefix.startswith(sprefix):
                return None
            if kind == skind == LOCAL and (prefix + os.sep).startswith(sprefix.rstrip(os.sep) + os.sep):
                return None
        return "not at or beside any source the index declares (its templates and provenance)"


def _locate(index: str | None) -> tuple[str, str | None, str | None]:
    """(kind of index, its folder when local, its host when served over HTTP)."""
    if index is None:
        return IN_MEMORY, None, None
    protocol, _ = split_protocol(index)
    if protocol in LOCAL_PROTOCOLS:
        paths = local_paths(index) or [os.path.abspath(index)]
        return LOCAL, os.path.dirname(os.path.realpath(paths[0].rstrip(os.sep) or os.sep)), None
    if protocol == "memory":
        return IN_MEMORY, None, None
    return REMOTE, None, _host_of(index) if protocol in HOST_PROTOCOLS else None


def _host_of(url: str) -> str | None:
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    return normalise_host(host) if host else None


def _kind_from_addresses(host: str, addresses: list) -> tuple[str, str]:
    """(kind, note) of a host name from what DNS answered (no answer: judged by its name, public)."""
    if not addresses:
        return PUBLIC, ""
    kind, address = worst_address(addresses)
    return kind, f" ({host} resolves to {address})"
