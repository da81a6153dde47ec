"""Does a path or URL name an Icechunk repository?  Answered without Icechunk's reader, so that
opening a JSON or parquet index (or an HDF5 file) imports none of it."""

from __future__ import annotations

import os
from typing import Any

from ... import urls

REPO_MARKER = "repo"  # the object every Icechunk (format 2) repository has at its root
OTHER_INDEX_SUFFIXES = (".json", ".parq", ".h5", ".hdf5", ".hdf", ".he5", ".nwb", ".nc", ".nc4", ".h5ad")


def named_otherwise(target: Any) -> bool:
    """Known without a request: ``target`` is a path or URL that cannot be a repository (it names
    another kind of index or an HDF5 file, or a protocol repositories are not read from)."""
    if not isinstance(target, (str, os.PathLike)):
        return False
    name = os.fspath(target)
    if name.split("?", 1)[0].rstrip("/").lower().endswith(OTHER_INDEX_SUFFIXES):
        return True
    return urls.split(name)[0] not in ("file", "s3", "s3a")


def names_repository(target: Any, storage_options: dict[str, Any] | None = None) -> bool:
    """Is ``target`` (a path or URL) an Icechunk repository?  One ``exists`` for remote names."""
    if not isinstance(target, (str, os.PathLike)) or named_otherwise(target):
        return False
    name = os.fspath(target)
    protocol, path = urls.split(name)
    if protocol == "file":
        return os.path.isfile(os.path.join(path, REPO_MARKER))
    try:
        fs, p = urls.filesystem(name, storage_options)
        return bool(fs.exists(p.rstrip("/") + "/" + REPO_MARKER))
    except Exception:  # noqa: BLE001 - not reachable as a repository: read as whatever else it is
        return False
