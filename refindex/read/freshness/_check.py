"""The freshness request: is an index's source still the file the index was made from?

One function, :func:`check_fresh`, for every reader of an index: saved indexes (JSON,
parquet), the cache of indexes made on the fly, batch re-runs, Icechunk commits and
h5py-style readers.  It asks the source's ``info`` (size, ETag, version id, mtime) and,
when those cannot settle it (see :mod:`._verdict`), reads the spans of the content
fingerprint the scan recorded, in the same round trip when that is known in advance.
It raises :class:`~refindex.errors.StaleIndexError` or returns what it learned and
fetched, so a caller can reuse the bytes (a reader of the file's head and tail, say).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ... import urls
from ...errors import SourceError, StaleIndexError
from ...source import described, fingerprint_digest, fingerprint_spans, merge_ranges, ranged
from ...source import info_with_ranges, one_round_trip, quick_filesystem, source_error, taken_ahead, with_retries
from ._verdict import needs_bytes_first, verdict

Span = tuple[int, int]
FIX = "re-scan it, or pass check_source=False / --no-check-source to read anyway"


@dataclass
class Freshness:
    """What a freshness check found: the source is unchanged (else it raised).

    ``how``: what proved it (``"etag"``, ``"version"``, ``"mtime"``, ``"fingerprint"``, or
    ``"size"`` for an index without a fingerprint whose source sends no validator);
    ``now``: the source's size and validators as they are; ``fetched``: the byte ranges read
    (fingerprint spans and the ``also`` ranges asked for), ``{(start, end): bytes}``.
    """

    how: str
    now: dict[str, Any]
    fetched: dict[Span, bytes] = field(default_factory=dict, repr=False)

    def bytes_at(self, start: int, end: int) -> bytes | None:
        """``start:end`` of the file when a fetched range holds it (else None)."""
        for (a, b), data in self.fetched.items():
            if a <= start and end <= b:
                return data[start - a : end - a]
        return None


def check_fresh(provenance: Mapping[str, Any], storage_options: dict[str, Any] | None = None, *,
                url: str | None = None, now: Mapping[str, Any] | None = None,
                also: Sequence[Span] = ()) -> Freshness:
    """Raise :class:`StaleIndexError` unless the source the index's ``provenance`` describes is unchanged.

    ``provenance``: ``refs["refindex"]["source"]`` (``url``, ``size``, ``etag``/``version``/
    ``mtime``, ``fingerprint``).  ``storage_options`` reach the source.  ``url``: look there
    instead (another copy of the file: its size and bytes must agree).  ``now``: the
    source's ``info`` when the caller has it already (a listing); ``also``: more byte
    ranges to read in the same round trip (returned in ``fetched``).
    """
    recorded = dict(provenance)
    where = urls.normalise(str(url if url is not None else recorded["url"]))
    same_place = where == recorded.get("url")
    spans = fingerprint_spans(recorded.get("fingerprint")) or []
    early = list(also) + (spans if spans and (not same_place or needs_bytes_first(recorded)) else [])
    # reading the whole file, the check needs no validator: its fingerprint's bytes are all at hand
    whole = bool(spans) and (0, recorded.get("size")) in also
    if now is None:
        info, fetched = _info_and_ranges(where, storage_options, early, head=not whole)
    else:
        info, fetched = dict(now), (_ranges(where, storage_options, early) if early else {})
    found = verdict(recorded, info, same_place)
    if found.outcome == "same":
        return Freshness(found.how, info, fetched)
    if found.outcome == "changed":
        raise _stale(where, found.why, recorded)
    if not spans:  # an index made before fingerprints: as good as its validators
        if found.changed_validators:
            raise _stale(where, found.why, recorded)
        return Freshness("size", info, fetched)
    missing = [s for s in spans if s not in fetched]
    if missing:
        fetched.update(_ranges(where, storage_options, missing))
    if fingerprint_digest(spans, (fetched[s] for s in spans)) != recorded["fingerprint"]["digest"]:
        raise _stale(where, found.why + "; the bytes the index depends on differ from the fingerprint it recorded",
                     recorded)
    return Freshness("fingerprint", info, fetched)


def _stale(where: str, why: str, recorded: Mapping[str, Any]) -> StaleIndexError:
    """The error for a source that is not what the index recorded; when the file asked about has
    another name than the one indexed, the index is most likely of another file, and it says so."""
    indexed = str(recorded.get("url") or "")
    if indexed and _name(indexed) != _name(where):
        return StaleIndexError(f"the index is of another file, {indexed}, and this one differs from it ({why}): "
                               "give the file the index was made from, or index this one", file=where)
    return StaleIndexError(f"source changed since it was indexed ({why}): {FIX}", file=where)


def _name(url: str) -> str:
    return url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


def _info_and_ranges(url: str, storage_options: dict[str, Any] | None, spans: list[Span],
                     head: bool = True) -> tuple[dict[str, Any], dict[Span, bytes]]:
    """The source's described ``info`` and the bytes of ``spans``, in one round trip where the
    filesystem reads concurrently (``head=False``: validators are not needed, see
    :func:`~refindex.source.info_with_ranges`)."""
    fs, path = quick_filesystem(url, storage_options)
    reads = merge_ranges([a for a, _ in spans], [b - a for a, b in spans])[0] if spans else []
    # the info an open asked while its index was still arriving (refindex.read.h5py_road.requested_early)
    early = taken_ahead(fs, path, ()) if not reads else None

    def once() -> list[Any]:
        nonlocal early
        asked, early = early, None  # (taken once: a retry asks again)
        if asked is not None:
            try:
                return asked.result()
            except Exception:  # noqa: BLE001 - asked again, with this check's own retries and errors
                pass
        if reads and one_round_trip(fs):  # a failed range read (a file that shrank, say) is left out: read again
            return info_with_ranges(fs, path, reads, head=head)
        return [fs.info(path), *(_read_local_or_sync(fs, path, reads) if reads else [])]

    try:
        info, *datas = with_retries(once)
    except SourceError:
        raise
    except Exception as e:
        raise source_error(e, url) from e
    if info.get("type") == "directory":
        raise SourceError("is a directory (a folder or an object-store prefix), not a file", file=url)
    return described(info), _cut(url, spans, reads, datas)


def _ranges(url: str, storage_options: dict[str, Any] | None, spans: list[Span]) -> dict[Span, bytes]:
    """The bytes of ``spans`` (close ones read as one request; one round trip)."""
    if not spans:
        return {}
    fs, path = quick_filesystem(url, storage_options)
    reads = merge_ranges([a for a, _ in spans], [b - a for a, b in spans])[0]
    try:
        datas = with_retries(_read_local_or_sync, fs, path, reads)
    except SourceError:
        raise
    except Exception as e:
        raise source_error(e, url, "could not read") from e
    return _cut(url, spans, reads, datas)


def _read_local_or_sync(fs: Any, path: str, reads: list[Span]) -> list[bytes]:
    if len(reads) == 1:
        return [fs.cat_file(path, start=reads[0][0], end=reads[0][1])]
    datas = fs.cat_ranges([path] * len(reads), [a for a, _ in reads], [b for _, b in reads])
    for d in datas:
        if isinstance(d, BaseException):
            raise d
    return datas


def _cut(url: str, spans: list[Span], reads: list[Span], datas: list[bytes]) -> dict[Span, bytes]:
    """Each span's bytes out of the merged reads that hold them.  A file shorter than a span
    (truncated) gives fewer bytes: its digest then differs."""
    out: dict[Span, bytes] = {}
    for (a, b), data in zip(reads, datas):
        if isinstance(data, BaseException):
            continue
        if len(data) > b - a:
            data = ranged(data, a, b, url)  # a server that ignores Range requests
        for s in spans:
            if a <= s[0] and s[1] <= b:
                out[s] = data[s[0] - a : s[1] - a]
    return out
