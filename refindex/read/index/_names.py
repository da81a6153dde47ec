"""What a target is by its name, and where an index made on the fly of it is kept.

Decided without the modules that read or scan (this imports almost nothing), so that
:func:`refindex.h5py_file` can start the first request of an open (an index's, or the first
round trip of a scan on the fly) before it loads them.  :mod:`._load` keeps the rest of the
cache's rules (freshness, atomic writes).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Literal

from ... import __version__, urls
from ...options import INDEX_FORM, ScanOptions

Kind = Literal["json", "parquet", "hdf5"]
HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5", ".nwb", ".nc", ".nc4", ".h5ad")
CacheSetting = bool | str | os.PathLike | None


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


def cache_folder(cache: CacheSetting = True) -> Path | None:
    """Where indexes made on the fly are kept (None: not kept)."""
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
