"""The indexes of the files an NWB file's external links point into, opened when a link first leads there."""

from __future__ import annotations

import os
from dataclasses import replace
from functools import partial
from typing import Any

from ... import urls
from ...errors import RefindexError, SourceError
from ...formats import ZarrFormat, for_zarr
from ..index._load import load_refs, zarr_format_of
from ..zarr_store._open import ReadOptions, index_store
from ..zarr_store._store import IndexStore
from ..index._urlcheck import declared_sources, untrusted
from ..index._urlpolicy import UrlPolicy


def _with_source(v: Any, source: str) -> Any:
    """``v`` (parsed JSON) with every ``{"source": ".", "path": ...}`` entry naming ``source`` instead."""
    if isinstance(v, dict):
        out = {k: _with_source(x, source) for k, x in v.items()}
        if out.get("source") == "." and "path" in out:
            out["source"] = source
        return out
    if isinstance(v, list):
        return [_with_source(x, source) for x in v]
    return v


def _rebase_self_refs(refs: dict[str, Any], source: str, fmt: ZarrFormat) -> dict[str, Any]:
    """A copy of ``refs`` (an index of ``fmt``) whose in-file links/attribute references (``source: "."``:
    hdmf-zarr's ``zarr_link`` and ``_LINKS``/``_REFERENCE`` entries) name ``source``.

    Objects read from a linked file are resolved by the IO of the file that links to them,
    so their own links must say which file they live in.  (References stored inside
    datasets of the linked file are left as they are.)
    """
    return fmt.with_attributes(refs, partial(_with_source, source=source))


class ExternalIndexes:
    """Opens the indexes of files that external links point into, by link ``source``.

    Looks, in order, in ``external`` (a dict source -> refs, JSON path or URL), in the
    index's ``refindex.external`` section (embedded ``refs`` or an ``index`` file beside
    the index) and finally scans the HDF5 file next to the indexed file on the fly.

    Each is an index in its own right, judged by ``opts``' URL policy when a link first
    leads into it: embedded ones as part of the index that holds them, index files and
    ``external`` entries as indexes from where they are; the file named for a scan on the
    fly must be one the index may name (the index made from it is then trusted).
    """

    def __init__(self, refs: dict[str, Any], opts: ReadOptions, *, index_location: str | None = None,
                 external: dict[str, Any] | None = None, scan_missing: bool = True):
        self.refs = refs
        self.format = for_zarr(zarr_format_of(refs))
        self.opts = opts
        self.index_location = index_location
        self.external = external or {}
        self.scan_missing = scan_missing
        self._stores: dict[str, IndexStore] = {}
        self._policy: UrlPolicy | None = None

    def _main_url(self) -> str | None:
        return (self.refs.get("templates") or {}).get("u")

    def _admit(self, url: str, where: str) -> None:
        """Refuse to read ``url`` (named by the main index at ``where``) if its policy refuses it."""
        if self.opts.trust:
            return
        if self._policy is None:
            self._policy = replace(self.opts, index_url=self.opts.index_url or self.index_location).url_policy()
            self._policy.learn([u for _, u in declared_sources(self.refs)])
        why = self._policy.refusal(url)
        if why:
            raise untrusted(self._policy, where, url, why)

    def _load(self, source: str) -> tuple[dict[str, Any], ReadOptions]:
        """(the index of ``source``, rebased; the options its store is made with)."""
        entry = ((self.refs.get("refindex") or {}).get("external") or {}).get(source) or {}
        opts, made_here = self.opts, False
        if source in self.external:
            given = self.external[source]
            r = load_refs(given)
            opts = replace(opts, index_url=None if isinstance(given, dict) else os.fspath(given))
        elif "refs" in entry:
            r = entry["refs"]  # judged as part of the index that holds it
        elif "index" in entry and self.index_location:
            where = urls.beside(self.index_location, entry["index"])
            self._admit(where, f"refindex.external[{source!r}].index")
            r = load_refs(where)
            opts = replace(opts, index_url=where)
        elif self.scan_missing and (entry.get("url") or self._main_url()):
            from ...options import ScanOptions
            from ...pipeline import scan_refs

            target = entry.get("url") or urls.beside(self._main_url(), source)
            self._admit(target, f"refindex.external[{source!r}].url" if entry.get("url") else
                        f"the external link source {source!r}")
            r = scan_refs(target, ScanOptions(convention="hdmf", zarr_format=self.format.number))
            opts, made_here = replace(opts, trust=True), True  # made here, from a file the index may name
        else:
            raise SourceError(f"no index for the externally linked file {source!r}", file=source)
        if not isinstance(r, dict):
            raise RefindexError("externally linked indexes must be JSON indexes", file=source)
        if self.opts.check_source and not made_here:  # (an index made here just now is fresh)
            from ..freshness import check_source

            check_source(r, storage_options=self.opts.remote_options)
        linked = for_zarr(zarr_format_of(r))
        if linked is not self.format:
            raise RefindexError(f"the index of the externally linked file is {linked.label}, the linking "
                                f"one {self.format.label}", file=source)
        return _rebase_self_refs(r, source, self.format), opts

    def store(self, source: str) -> IndexStore:
        if source not in self._stores:
            r, opts = self._load(source)
            label = "refindex:" + ((r.get("templates") or {}).get("u") or source)
            self._stores[source] = index_store(r, opts, label=label)
        return self._stores[source]
