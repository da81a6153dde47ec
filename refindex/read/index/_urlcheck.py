"""Every URL an index names, checked against a :class:`~refindex.read.UrlPolicy` before its reader
fetches anything.

A JSON index is checked whole when it is opened: its templates, its provenance source and
the distinct URLs of its chunk references (one pass over the values, then one judgement
per distinct URL after template expansion; an index of a million chunks in one file is a
million dictionary lookups and one judgement).  A parquet index loads its references
record by record as keys are read, so its declared sources are checked at open and every
URL a key resolves to is judged before its bytes are requested (one dictionary lookup
per key after the first judgement).  Refusals are :class:`UntrustedReference` errors
naming a key, how many keys name the URL, the URL, the reason and how to allow it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ...errors import UntrustedReference
from ._urlpolicy import UrlPolicy

_TEMPLATE = re.compile(r"{{\s*(\w+)\s*}}")

_GUARDED: Any = None


def expand_url(url: str, templates: Mapping[str, str]) -> str:
    """``url`` with each ``{{name}}`` replaced by ``templates[name]`` (KeyError: an undefined one)."""
    if "{{" not in url:
        return url
    return _TEMPLATE.sub(lambda m: templates[m.group(1)], url)


def declared_sources(refs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(where, URL) of every file an index says its chunks come from: templates, the provenance
    source, the files its external links lead to.  Templates that are themselves templates
    (jinja) are left to the URLs they expand into."""
    out: list[tuple[str, str]] = []
    templates = refs.get("templates")
    if isinstance(templates, Mapping):
        out += [(f"templates[{name!r}]", url) for name, url in templates.items()
                if isinstance(url, str) and "{{" not in url]
    prov = refs.get("refindex")
    prov = prov if isinstance(prov, Mapping) else {}
    source = prov.get("source")
    if isinstance(source, Mapping) and isinstance(source.get("url"), str):
        out.append(("refindex.source.url", source["url"]))
    external = prov.get("external")
    for name, entry in (external.items() if isinstance(external, Mapping) else ()):
        if isinstance(entry, Mapping) and isinstance(entry.get("url"), str):
            out.append((f"refindex.external[{name!r}].url", entry["url"]))
    return out


def distinct_first_items(body: Mapping[str, Any]) -> set[str]:
    """The distinct URLs (as written, templates unexpanded) of the references in ``body``.

    Mirrors what :class:`~refindex.read.IndexStore` fetches: any list or tuple value is a
    reference, its first item the URL (as text).  One tight pass (the cost of the whole
    check on a large index); odd values (empty lists, unhashable items) take a slower one.
    """
    found: set[Any] = set()
    add = found.add
    try:
        for v in body.values():
            cls = v.__class__
            if cls is list or (cls is not str and isinstance(v, (list, tuple))):
                add(v[0])
    except (IndexError, TypeError):
        found = {str(v[0]) for v in body.values() if isinstance(v, (list, tuple)) and v}
    return {u if u.__class__ is str else str(u) for u in found}


def keys_naming(body: Mapping[str, Any], raw: str) -> tuple[str, int]:
    """(first key in sort order, number of keys) whose reference names ``raw`` (only run to word a refusal)."""
    first, uses = "", 0
    for key, v in body.items():
        if isinstance(v, (list, tuple)) and v and str(v[0]) == raw:
            uses += 1
            first = key if not first or key < first else first
    return first, uses


def untrusted(policy: UrlPolicy, key: str, url: str, why: str, uses: int = 0) -> UntrustedReference:
    """The refusal, worded so the reader can act on it."""
    if uses > 1:
        key_words = f"key {key!r} (and {uses - 1} more naming the same URL)"
    else:
        key_words = key if key.startswith(("templates[", "refindex.")) else f"key {key!r}"
    return UntrustedReference(
        f"{key_words} points at {url}: {why}. refindex reads it only when allowed: allowed_urls=[{url!r}] "
        "(CLI: --allow-url URL), or trust=True (--trust) for an index you trust",
        key=key, url=url, uses=uses, file=policy.index)


def check_refs(policy: UrlPolicy, refs: Mapping[str, Any], *, provenance: bool = True) -> None:
    """Refuse a JSON index (dict) that names any URL ``policy`` refuses, before anything is read.

    ``provenance``: judge the provenance source too (it is asked when freshness is checked).
    """
    if policy.trust:
        return
    body = refs.get("refs") if "version" in refs else refs
    if not isinstance(body, Mapping):
        return
    templates = refs.get("templates")
    templates = templates if isinstance(templates, Mapping) else {}
    expanded: dict[str, str] = {}
    for raw in distinct_first_items(body):
        try:
            expanded[raw] = expand_url(raw, templates)
        except KeyError:
            continue  # an undefined template: the read fails on it, naming the key
    check_declared(policy, refs, also=expanded.values(), provenance=provenance)
    for raw, url in sorted(expanded.items()):
        why = policy.refusal(url)
        if why:
            key, uses = keys_naming(body, raw)
            raise untrusted(policy, key, url, why, uses)


def check_declared(policy: UrlPolicy, refs: Mapping[str, Any], also: Any = (), *, provenance: bool = True) -> None:
    """Note the sources ``refs`` declares (and the URLs in ``also``), and refuse the index if its
    templates (or, with ``provenance``, its provenance source) are refused themselves.  The
    ``url`` of an external file is judged when a link leads to it (it is only read then)."""
    if policy.trust:
        return
    declared = declared_sources(refs)
    policy.declare([url for _, url in declared])
    policy.learn(list(also))
    for where, url in declared:
        if where.startswith("refindex.external[") or (where == "refindex.source.url" and not provenance):
            continue
        why = policy.refusal(url)
        if why:
            raise untrusted(policy, where, url, why)


def check_mapping(policy: UrlPolicy, references: Mapping[str, Any]) -> None:
    """Refuse references whose URLs are already expanded (fsspec's, after generators) if any is refused."""
    distinct = distinct_first_items(references)
    policy.learn(distinct)
    for url in sorted(distinct):
        why = policy.refusal(url)
        if why:
            key, uses = keys_naming(references, url)
            raise untrusted(policy, key, url, why, uses)


def guarded_reference_fs(policy: UrlPolicy | None, **kwargs: Any) -> Any:
    """fsspec's ``ReferenceFileSystem(**kwargs)``, asking ``policy`` about the URL of every key before
    reading it (None: no questions).  References held as a dict are checked whole at once."""
    fs = _guarded_class()(**kwargs)
    fs.refindex_policy = policy
    if policy is not None and isinstance(fs.references, dict):
        check_mapping(policy, fs.references)
    return fs


def _guarded_class() -> Any:
    global _GUARDED
    if _GUARDED is not None:
        return _GUARDED
    from fsspec.implementations.reference import ReferenceFileSystem

    class GuardedReferenceFileSystem(ReferenceFileSystem):
        """Every read resolves a key through ``_cat_common`` (``info`` of a whole-file reference
        aside, guarded here too): the URL is judged there, before any byte is requested."""

        refindex_policy: UrlPolicy | None = None

        def _admit(self, key: str, url: Any) -> None:
            policy = self.refindex_policy
            if policy is not None and isinstance(url, str):
                why = policy.refusal(url)
                if why:
                    raise untrusted(policy, key, url, why)

        def _cat_common(self, path, start=None, end=None):
            part, s, e = super()._cat_common(path, start, end)
            self._admit(path, part)
            return part, s, e

        def info(self, path, **kwargs):
            self._admit_whole(path)
            return super().info(path, **kwargs)

        async def _info(self, path, **kwargs):
            self._admit_whole(path)
            return await super()._info(path, **kwargs)

        def _admit_whole(self, path: str) -> None:
            try:
                part = self.references[self._strip_protocol(path)]
            except Exception:  # not a key (a folder), or a record that cannot load: nothing to fetch
                return
            if isinstance(part, (list, tuple)) and part:
                self._admit(path, part[0])

    _GUARDED = GuardedReferenceFileSystem
    return _GUARDED
