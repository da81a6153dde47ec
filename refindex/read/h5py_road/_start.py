"""``refindex.h5py_file``'s first steps: the index's request goes out before the modules that read it load.

Opening a published index is two round trips (the index, the freshness check of its file)
and refindex's own imports (~25 ms: the source layer, the road's file object, the pages'
decoder).  This module imports almost nothing, so a JSON index at an HTTP(S) URL is
requested first, in a thread (:func:`fetch_early`), and those imports run while its answer
travels; the rest of the open (:mod:`._open`) takes the bytes from there.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ...gcpause import held_collections

if TYPE_CHECKING:  # (not loaded at run time: the request goes out first)
    from .._load import CacheSetting


def h5py_file(target: Any, *, storage_options: dict[str, Any] | None = None,
              remote_options: dict[str, Any] | None = None, check_source: bool = True, cache: CacheSetting = True,
              allowed_urls: Sequence[str] | None = None, trust: bool = False, group: str | None = None,
              branch: str | None = None, snapshot: str | None = None) -> Any:
    """A read-only ``h5py.File`` of the HDF5 file an index describes, opened from the index's pages.

    ``target``: an index (dict, JSON path/URL, parquet folder, Icechunk repository with
    ``group``/``branch``/``snapshot``) or the HDF5 file itself (local path or URL: scanned
    on the fly, or found in the local index ``cache``, as :func:`refindex.open_nwb` does).
    libhdf5 reads the metadata the index carries (its pages: no request); other bytes come
    by range requests from the file, through refindex's source layer (retries, a block cache
    for small reads, the chunks libhdf5 will ask for next fetched ahead, concurrently).

    It is a real ``h5py.File`` (h5py's file-object driver): unchanged h5py code, pynwb's
    ``NWBHDF5IO(file=...)``, nwbinspector or dandi-cli read it as they read any file.  The
    index is checked against its source (``check_source``) before any page is served.
    ``storage_options`` reach the index (or the HDF5 file given directly),
    ``remote_options`` the file an index describes (default: ``storage_options``); the
    other keywords are those of :func:`refindex.open`.  An index without pages (made with
    ``pages=False`` or by another tool) still works: every metadata read is then a request.
    External links cannot be followed through h5py's file-object driver: a file that has
    some opens with a :class:`~refindex.RefindexWarning`, and following one fails loudly.
    """
    with held_collections():  # what an open allocates lives as long as the file (refindex.gcpause)
        fetched = fetch_early(target, storage_options)
        from ._open import open_road, prepared

        return open_road(prepared(target, storage_options=storage_options, remote_options=remote_options,
                                  check_source=check_source, cache=cache, allowed_urls=allowed_urls, trust=trust,
                                  group=group, branch=branch, snapshot=snapshot, fetched=fetched).road())


def fetch_early(target: Any, storage_options: dict[str, Any] | None) -> Future | None:
    """The bytes of a JSON index named by an HTTP(S) URL (``.json``), requested now in a thread, as
    :func:`~refindex.read.load_refs` would request them (refindex's own HTTP client, retries);
    None for anything else, which is read as before."""
    if not isinstance(target, str) or not target.split("?", 1)[0].lower().endswith(".json"):
        return None
    from ...source import honours, quick_filesystem, with_retries  # _quick, _http and _retry only

    if not honours(target, storage_options):  # not HTTP(S), or options only fsspec honours: read as before
        return None
    fs, path = quick_filesystem(target, storage_options)
    fetched: Future = Future()

    def fetch() -> None:
        try:
            fetched.set_result(with_retries(fs.cat_file, path))
        except BaseException as e:  # noqa: BLE001 - the reader raises it, as it would have
            fetched.set_exception(e)

    threading.Thread(target=fetch, name="refindex-index", daemon=True).start()
    return fetched
