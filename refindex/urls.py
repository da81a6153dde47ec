"""One vocabulary for the places refindex reads and writes: local paths and fsspec URLs.

A location is a local path (relative, absolute or ``file://...``) or ``protocol://rest``.
Local locations are made absolute wherever they are split or normalised, so the same
file always has the same name in indexes, manifests and caches.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

LOCAL_PROTOCOLS = ("file", "local")


def split(url: str) -> tuple[str, str]:
    """(protocol, path): ``("file", absolute path)`` for local locations, else ``("s3", "bucket/key")``."""
    if "://" in url:
        protocol, rest = url.split("://", 1)
        if protocol not in LOCAL_PROTOCOLS:
            return protocol, rest
        url = rest
    return "file", os.path.abspath(url)


def join(protocol: str, path: str) -> str:
    """The location of ``path`` under ``protocol`` (local paths stay plain paths)."""
    return path if protocol in LOCAL_PROTOCOLS else f"{protocol}://{path}"


def is_local(url: str) -> bool:
    return "://" not in url or url.split("://", 1)[0] in LOCAL_PROTOCOLS


def normalise(url: str) -> str:
    """Local locations as absolute paths, remote ones unchanged."""
    return join(*split(url))


def folder(url: str) -> str:
    """The folder holding ``url`` (a URL for remote locations)."""
    protocol, path = split(url)
    return join(protocol, os.path.dirname(path) if protocol == "file" else posixpath.dirname(path))


def beside(url: str, name: str) -> str:
    """``name`` (relative path, absolute path or URL) resolved against the folder of ``url``, normalised."""
    if "://" in name:
        return name
    protocol, path = split(url)
    if protocol == "file":
        return os.path.normpath(os.path.join(os.path.dirname(path), name))
    return join(protocol, posixpath.normpath(posixpath.join(posixpath.dirname(path), name)))


def relative(url: str, name: str) -> str:
    """``name`` (as a file names another file) relative to the folder of ``url`` where it can be."""
    if "://" in name:
        return name
    if os.path.isabs(name) and is_local(url):
        return os.path.relpath(name, os.path.dirname(split(url)[1]))
    return posixpath.normpath(name)


def within(target: str, root: str) -> bool:
    """Is ``target`` ``root`` itself or below it (same protocol; local symlinks resolved)?"""
    tp, tr = split(target)
    rp, rr = split(root)
    if tp != rp:
        return False
    if tp == "file":
        tr, rr = os.path.realpath(tr), os.path.realpath(rr)
    tr, rr = tr.rstrip("/"), rr.rstrip("/")
    return tr == rr or tr.startswith(rr + "/") or rr == ""


def filesystem(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """(fsspec filesystem, path) for ``url``; ``storage_options`` apply to remote locations only."""
    import fsspec

    protocol, path = split(url)
    if protocol == "file":
        return fsspec.filesystem("file"), path
    return fsspec.core.url_to_fs(url, **(storage_options or {}))
