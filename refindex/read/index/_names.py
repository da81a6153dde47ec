"""What a target is by its name, and where an index made on the fly of it is kept (the *index cache*).

The index cache's setting (``cache=`` of ``open``, ``h5py_file``, ``open_nwb``...: True for
``$REFINDEX_CACHE_DIR`` and its defaults, a folder, or False) is resolved once, where a call
enters, into an :class:`IndexCache` that the steps of the call pass on.  Not to be confused with
the *block cache* (:class:`refindex.source.BlockCache`, a file's bytes held in memory during a
scan or a read) or the *fetch options* that tune it (:class:`refindex.options.FetchOptions`).

Decided without the modules that read or scan (this imports almost nothing), so that
:func:`refindex.h5py_file` can start the first request of an open (an index's, or the first
round trip of a scan on the fly) before it loads them.  :mod:`._load` keeps the rest of the
cache's rules (freshness, atomic writes).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Union

from ... import __version__, urls
from ...options import INDEX_FORM, ScanOptions

Kind = Literal["json", "parquet", "hdf5"]
HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5", ".nwb", ".nc", ".nc4", ".h5ad")


def kind_by_name(target: str) -> Kind | None:
    """``"json"``, ``"parquet"`` or ``"hdf5"`` where the name says (``.json``, ``.parq`` or a
    trailing ``/``, ``.nwb``/``.h5``...), else None (the first bytes decide)."""
    name = target.split("?", 1)[0].rstrip("/").lower()
    if name.endswith(".json"):
        return "json"
    if name.endswith(".parq") or target.endswith("/"):
        return "parquet"
    if name.endswith(HDF5_SUFFIXES):
        return "hdf5"
    return None


def cache_folder(cache: "CacheSetting" = True) -> Path | None:
    """Where indexes made on the fly are kept (None: not kept)."""
    if isinstance(cache, IndexCache):
        return cache.folder
    if cache is False or cache is None:
        return None
    if cache is not True:
        return Path(os.fspath(cache))
    env = os.environ.get("REFINDEX_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("off", "0", "no", "false", "") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "refindex"


def cache_entry(folder: Path, url: str, options: ScanOptions) -> Path:
    """The cache file of ``url``'s index: keyed by the file's URL, refindex's version, the form of its
    indexes (:data:`~refindex.options.INDEX_FORM`) and the options that decide the index's content."""
    material = json.dumps({"url": urls.normalise(url), "refindex": __version__, "form": INDEX_FORM,
                           "options": options.recorded(), "convention": options.convention},
                          sort_keys=True, default=repr)
    return folder / (hashlib.sha256(material.encode()).hexdigest()[:40] + ".refs.json")


@dataclass(frozen=True)
class IndexCache:
    """The index cache of one call, its setting resolved once (:meth:`of`): ``folder`` None when off."""

    folder: Path | None

    @classmethod
    def of(cls, setting: "CacheSetting" = True) -> "IndexCache":
        """``setting`` resolved (the environment read now); an :class:`IndexCache` is returned as it is."""
        return setting if isinstance(setting, IndexCache) else cls(cache_folder(setting))

    def entry(self, url: str, options: ScanOptions) -> Path | None:
        """:func:`cache_entry` of ``url`` in this cache (None: the cache is off)."""
        return None if self.folder is None else cache_entry(self.folder, url, options)

    def holds(self, url: str) -> bool:
        """Does the cache hold an index of ``url`` made with the default options?  (An entry's name does
        not depend on storage options.)"""
        entry = self.entry(url, ScanOptions())
        return entry is not None and entry.exists()


# ``cache=`` of the read side: True (the default folder), a folder, False/None (off), or one already resolved
CacheSetting = Union[bool, str, os.PathLike, None, IndexCache]
