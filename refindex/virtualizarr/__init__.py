"""refindex as a VirtualiZarr parser: ``open_virtual_dataset(url, parser=refindex.virtualizarr.Parser(), registry=...)``.

VirtualiZarr (>= 2.8) builds virtual datasets from any callable ``parser(url, registry) ->
ManifestStore``.  :class:`Parser` scans the file with refindex (the scan, safety gate and zarr
verdicts of ``refindex.scan(..., zarr_format=3)`` in the ``plain`` convention) and hands that
v3 hierarchy to VirtualiZarr unchanged (:mod:`.manifests`).

Bytes and URLs: refindex reads the file itself (fsspec with ``storage_options``, through its
remote block cache), as ``refindex.scan`` does; chunk references name the file by the URL
VirtualiZarr passes in (``file:///...`` for a local path, ``s3://...`` as given), which is
what the caller's ``ObjectStoreRegistry`` resolves when chunks are read through the returned
store (loadable variables, direct zarr reads) and what Icechunk's virtual chunk containers
match.

What xarray cannot model is not forced into it: HDMF/NWB files (object references, links,
ragged tables) are refused unless a ``convention`` is given; refindex's zarr v3 index, read
with hdmf-zarr's ``NWBZarrIO``, serves those.

VirtualiZarr and obstore are optional (``pip install refindex[virtualizarr]``): they load when a
parser runs, and nothing else in refindex imports this package.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Iterable, Unpack

from ..errors import RefindexError
from ..options import ScanKeywords, ScanOptions, options_from
from .scan import NWB_HINT, Scan, as_uri, scan

if TYPE_CHECKING:
    from obspec_utils.registry import ObjectStoreRegistry
    from virtualizarr.manifests import ManifestStore

__all__ = ["NWB_HINT", "Parser", "Scan", "as_uri", "scan"]


class Parser:
    """A VirtualiZarr parser (``virtualizarr.parsers.typing.Parser``) backed by refindex's scanner.

    ``group``: the HDF5 group that becomes the store's root (as VirtualiZarr's own parsers take
    it).  ``drop_variables``: arrays of that group left out.  Every other option is
    ``refindex.scan``'s, as ``options=ScanOptions(...)`` and/or keywords: ``storage_options``
    (fsspec, for reading the file), ``inline_threshold``, ``on_unsupported="skip"`` (what
    cannot be represented is left out with a warning naming it, instead of failing the
    file), ``contiguous_chunk_bytes``, ``isolate``/``timeout`` (libhdf5 in a worker process),
    ``convention`` (``auto``: plain, and HDMF/NWB files refused).  The zarr format is 3.

    One default differs from ``refindex.scan``'s: ``inline_threshold`` is 0, so chunks are
    referenced however small (small *datasets* are still copied in whole, below
    ``inline_dataset_threshold``).  VirtualiZarr's Icechunk writer stores each inlined chunk
    with its own ``set`` call (~0.2 ms each): P1's 500,000 chunks of ~30 bytes would take
    minutes there, and all its chunks in memory as Python bytes.

    Holds only options, so it pickles (``open_virtual_mfdataset(..., parallel=...)``).
    """

    def __init__(self, group: str | None = None, drop_variables: Iterable[str] | None = None, *,
                 options: ScanOptions | None = None, **keywords: Unpack[ScanKeywords]) -> None:
        if options is None and keywords.get("inline_threshold") in (None, "default"):
            keywords["inline_threshold"] = 0  # see the class docstring
        self.group = group
        self.drop_variables = list(drop_variables or [])
        self.options = options_from(options, keywords).but(zarr_format=3)

    def __call__(self, url: str, registry: "ObjectStoreRegistry") -> "ManifestStore":
        """Scan ``url`` and return its ``ManifestStore`` (referenced chunks resolved through ``registry``)."""
        from ..codecs import register_v3_codecs
        from .manifests import manifest_store

        register_v3_codecs()  # refindex's and imagecodecs' v3 codecs, for reads in this process
        check_registry(registry, url)
        found = scan(url, self.options)
        left_out = [s for s in found.skipped if "holds no data" not in s["reason"]]  # netCDF's bare dimensions
        if left_out:
            listed = "; ".join(f"{s['path']}: {s['reason']}" for s in left_out[:10])
            more = f" (and {len(left_out) - 10} more)" if len(left_out) > 10 else ""
            warnings.warn(f"{url}: left out {len(left_out)} object(s): {listed}{more}", stacklevel=2)
        return manifest_store(found, registry, self.group, self.drop_variables)

    def __repr__(self) -> str:
        return f"refindex.virtualizarr.Parser(group={self.group!r}, drop_variables={self.drop_variables!r})"


def check_registry(registry: Any, url: str) -> None:
    """Fail now, naming the URL, when ``registry`` cannot serve the file's chunks (not at the first read)."""
    if registry is None:
        return
    try:
        registry.resolve(as_uri(url))
    except ValueError as e:
        raise RefindexError(f"the ObjectStoreRegistry has no store for this URL ({e}); register one, e.g. "
                            "ObjectStoreRegistry({'file://': obstore.store.LocalStore()}) for local files",
                            file=url) from e
