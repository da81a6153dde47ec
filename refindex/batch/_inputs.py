"""Which files a batch indexes, and where their indexes go."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from .. import urls
from ..errors import RefindexError

Format = Literal["json", "parquet", "icechunk"]
SUFFIX = {"json": ".refs.json", "parquet": ".refs.parq"}  # one index per input; icechunk: one repository
MANIFEST_NAME = "refindex-manifest.jsonl"
_GLOB_CHARS = "*?["


def _is_ours(path: str) -> bool:
    """Files a glob must not feed back in: indexes and manifests."""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    return (base.endswith((".refs.json", ".refs.parq")) or ".refs.parq/" in path or base.startswith("refindex-manifest")
            or base.startswith(".refindex-"))


def _read_list(url: str, storage_options: dict[str, Any] | None) -> list[str]:
    fs, path = urls.filesystem(url, storage_options)
    try:
        text = fs.cat_file(path).decode("utf-8")
    except FileNotFoundError as e:
        raise RefindexError("list of inputs not found", file=url) from e
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def expand_inputs(inputs: str | os.PathLike | Iterable[str | os.PathLike],
                  storage_options: dict[str, Any] | None = None) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Input URLs in order (duplicates dropped), plus stat info listings already gave us."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    found: list[str] = []
    known: dict[str, dict[str, Any]] = {}
    for item in inputs:
        item = os.fspath(item)
        if item.startswith("@") or (item.endswith(".txt") and not any(c in item for c in _GLOB_CHARS)):
            found.extend(urls.normalise(u) for u in _read_list(item.removeprefix("@"), storage_options))
        elif _is_folder(item):
            for url, detail in _folder_files(item, storage_options):
                found.append(url)
                known[url] = detail
        elif any(c in item for c in _GLOB_CHARS):
            protocol, _ = urls.split(item)
            fs, pattern = urls.filesystem(item, storage_options)
            fs.invalidate_cache()  # listings of an earlier run in this process may be stale
            listed = fs.glob(pattern, detail=True)
            for path in sorted(listed):
                detail = listed[path]
                if detail.get("type", "file") != "file" or _is_ours(path):
                    continue
                url = urls.join(protocol, path)
                found.append(url)
                known[url] = detail
        else:
            found.append(urls.normalise(item))
    seen: set[str] = set()
    ordered = [u for u in found if not (u in seen or seen.add(u))]
    return ordered, known


def _is_folder(item: str) -> bool:
    """A local folder, or a remote prefix (named with a trailing ``/``, as ``s3://bucket/raw/``)."""
    if any(c in item for c in _GLOB_CHARS):
        return False
    protocol, path = urls.split(item)
    return os.path.isdir(path) if protocol == "file" else item.endswith("/")


def _folder_files(item: str, storage_options: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """Every file below a folder or prefix whose name says HDF5 (``.h5``, ``.nwb``, ``.nc`` ...), sorted,
    with its listing entry; indexes and manifests left out."""
    from ..read.index._names import HDF5_SUFFIXES

    protocol, _ = urls.split(item)
    fs, path = urls.filesystem(item, storage_options)
    fs.invalidate_cache()
    try:
        listed = fs.find(path.rstrip("/"), detail=True)
    except FileNotFoundError as e:
        raise RefindexError("folder not found", file=item) from e
    return [(urls.join(protocol, p), listed[p]) for p in sorted(listed)
            if listed[p].get("type", "file") == "file" and not _is_ours(p) and p.lower().endswith(HDF5_SUFFIXES)]


def common_root(locations: Sequence[str]) -> str:
    """The deepest folder holding every input (a URL for remote inputs)."""
    protocols = {urls.split(u)[0] for u in locations}
    paths = [urls.split(u)[1] for u in locations]
    if len(protocols) != 1:
        raise RefindexError("inputs mix local and remote files: pass output= and manifest= explicitly")
    protocol = protocols.pop()
    if protocol == "file":
        root = os.path.commonpath([os.path.dirname(p) for p in paths])
    else:
        root = posixpath.commonpath(["/" + posixpath.dirname(p) for p in paths]).lstrip("/")
    return urls.join(protocol, root)


def index_location(source: str, fmt: Format, output: str | None, root: str | None) -> str:
    """Where the index of ``source`` goes: beside it, or under ``output`` mirroring ``root``."""
    if output is None:
        return source + SUFFIX[fmt]
    path = urls.split(source)[1]
    rel = path[len(urls.split(root)[1]):].lstrip("/") if root else path.lstrip("/")
    out_protocol, out_path = urls.split(output)
    if out_protocol == "file":
        return os.path.join(out_path, *rel.split("/")) + SUFFIX[fmt]
    return urls.join(out_protocol, out_path.rstrip("/") + "/" + rel + SUFFIX[fmt])
