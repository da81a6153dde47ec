"""The manifest of a batch (one row per input), and what needs scanning again.

A re-run skips inputs whose index exists and whose source is unchanged, by the freshness
check every reader uses (:func:`refindex.read.check_fresh`): the validators recorded in the
previous manifest (or, without a row, in the index's own provenance) against the listing's,
and when those cannot settle it, the content fingerprint the index recorded.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .. import urls
from ..errors import RefindexError
from ..options import INDEX_FORM, ScanOptions
from ..source import file_info, same_mtime
from ..formats import ZMETADATA, atomic_file, atomic_write_bytes, output_error
from ._inputs import Format, index_location
from ._listing import listed
from ._results import FileResult


# HEAD requests in flight when a store has no listing (HTTP): a re-run over 1,000 unchanged files waits
# 1,000 / STAT_THREADS round trips (P9's append: 16 took 3.3 s on the 30 ms store, 64 0.9-1.5 s, 128 1.0 s).
STAT_THREADS = 64


def now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def options_fingerprint(fmt: Format, options: ScanOptions, record_size: int | None) -> str:
    """Short hash of what shapes an index (format, the options it records, convention, the form of indexes;
    never credentials): a row of another fingerprint is indexed again."""
    shown = {"format": fmt, "convention": options.convention, "form": INDEX_FORM, **options.recorded()}
    if record_size is not None:
        shown["record_size"] = record_size
    return hashlib.sha1(json.dumps(shown, sort_keys=True, default=repr).encode()).hexdigest()[:12]


def _normal_info(detail: dict[str, Any]) -> dict[str, Any]:
    """size / etag / mtime from an fsspec info or listing entry, as the index records them."""

    class _Listed:  # file_info calls fs.info(path); answer with what we already have
        @staticmethod
        def info(_path: str) -> dict[str, Any]:
            return detail

    return file_info(_Listed(), "")


def unchanged(recorded: dict[str, Any], now: dict[str, Any]) -> bool:
    """Validators alone (an index without a fingerprint): same size, and the same etag when both
    have one (else the same mtime, to the second: listings and HEAD requests differ below it)."""
    if recorded.get("size") is None or recorded.get("size") != now.get("size"):
        return False
    if recorded.get("etag") and now.get("etag"):
        return recorded["etag"] == now["etag"]
    return bool(same_mtime(recorded.get("mtime"), now.get("mtime")))


def source_unchanged(url: str, recorded: dict[str, Any], now: dict[str, Any], storage_options: dict[str, Any] | None,
                     provenance: Callable[[], dict[str, Any] | None]) -> bool:
    """Is ``url`` still the file ``recorded`` (a manifest row, or an index's provenance) describes?

    The freshness check of every reader (:func:`refindex.read.check_fresh`): validators first
    (from the listing, no request), and when they cannot settle it (none sent, or changed by a
    re-upload) the content fingerprint the index recorded, read from ``provenance()``.
    """
    from ..read.freshness import check_fresh, verdict

    found = verdict(recorded, now)
    if found.outcome != "ask":
        return found.outcome == "same"
    prov = recorded if recorded.get("fingerprint") else provenance()
    if not prov or not prov.get("fingerprint"):
        return unchanged(recorded, now)  # an index made before fingerprints
    try:
        check_fresh(prov, storage_options, url=url if prov.get("url") == url else None, now=now)
    except RefindexError:  # changed (StaleIndexError), or unreadable now: scanned again
        return False
    return True


def _index_provenance(index: str, fmt: Format, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """``refs["refindex"]["source"]`` of an existing index, or None when there is none."""
    from ..read import load_refs, parquet_metadata

    try:
        doc = load_refs(index, storage_options) if fmt == "json" else parquet_metadata(index, storage_options)
        return (doc.get("refindex") or {}).get("source")
    except Exception:  # missing or unreadable: simply not up to date
        return None


def _index_exists(index: str, fmt: Format, storage_options: dict[str, Any] | None) -> bool:
    try:
        fs, path = urls.filesystem(index, storage_options)
        return bool(fs.exists(path.rstrip("/") + "/" + ZMETADATA if fmt == "parquet" else path))
    except Exception:
        return False


# ------------------------------------------------------------------ manifest
def read_manifest(url: str, storage_options: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Rows of a manifest keyed by source; {} when it does not exist or cannot be read."""
    try:
        fs, path = urls.filesystem(url, storage_options)
        if not fs.exists(path):
            return {}
        data = fs.cat_file(path)
        if url.endswith(".parquet"):
            import pyarrow.parquet as pq

            rows = pq.read_table(io.BytesIO(data)).to_pylist()
        else:
            rows = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    except Exception as e:  # a damaged manifest: fall back to the indexes' own provenance
        print(f"refindex batch: ignoring unreadable manifest {url}: {e}", file=sys.stderr)
        return {}
    return {r["source"]: r for r in rows if isinstance(r, dict) and r.get("source")}


def write_manifest(rows: Iterable[dict[str, Any]], url: str, storage_options: dict[str, Any] | None = None) -> None:
    """Write the manifest atomically (JSON lines, or parquet when ``url`` ends in .parquet).  A local JSON-lines
    manifest is written a row at a time (a batch of 10^5 inputs never holds every row's dict and line at once)."""
    protocol, path = urls.split(url)
    try:
        if protocol == "file" and not url.endswith(".parquet"):
            with atomic_file(path, "the manifest") as fh:
                for r in rows:
                    fh.write(_line(r))
            return
        data = _parquet(list(rows)) if url.endswith(".parquet") else b"".join(_line(r) for r in rows)
        if protocol == "file":
            atomic_write_bytes(path, data, "the manifest")
        else:
            fs, p = urls.filesystem(url, storage_options)
            fs.pipe_file(p, data)
    except Exception as e:
        raise output_error(e, url, "the manifest") from e


def _line(row: dict[str, Any]) -> bytes:
    return (json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _parquet(rows: list[dict[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([{**r, "mtime": None if r.get("mtime") is None else str(r["mtime"])} for r in rows])
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


# ------------------------------------------------------------------ planning
def current_infos(sources: list[str], known: dict[str, dict[str, Any]], storage_options: dict[str, Any] | None
                  ) -> dict[str, dict[str, Any] | RefindexError]:
    """size/etag/mtime of every input now: from the listings that found them, from a listing of
    their folder where it holds many of them (:mod:`._listing`), the rest by HEAD, STAT_THREADS at once."""
    out: dict[str, dict[str, Any] | RefindexError] = {}
    for u, detail in known.items():
        try:
            out[u] = _normal_info(detail)
        except RefindexError as e:
            out[u] = e

    def stat(u: str) -> dict[str, Any] | RefindexError:
        try:
            fs, path = urls.filesystem(u, storage_options)
            return file_info(fs, path)
        except RefindexError as e:
            return e
        except Exception as e:  # noqa: BLE001
            return RefindexError(f"cannot stat: {type(e).__name__}: {e}", file=u)

    todo = [u for u in sources if u not in out]
    for u, entry in listed(todo, storage_options).items():  # a listing's 1,000 a request, not a HEAD each
        if entry is not None and entry.get("type", "file") == "file":
            try:
                out[u] = _normal_info(entry)
            except RefindexError as e:
                out[u] = e
    todo = [u for u in todo if u not in out]  # (absent from the listing: the HEAD says how)
    with ThreadPoolExecutor(max_workers=STAT_THREADS) as ex:
        for u, info in zip(todo, ex.map(stat, todo)):
            out[u] = info
    return out


@dataclass
class Plan:
    """The inputs planned against the manifest and their indexes' presence, before the sources are asked.

    ``jobs``: inputs that no answer about their source can show up to date (no index, a manifest row
    of other options or a failure, ``force``): they can be scanned at once.  ``asking``: inputs with an
    index whose freshness their source must tell (size and ETag from a listing, or a HEAD);
    :meth:`settle` asks, while the jobs run (an append over 10,000 unchanged objects waits ~3.5 s for
    their listing's pages: the new files' scans need not)."""

    rows: list[FileResult | None]
    jobs: list[tuple[int, str, str]]  # (position, source, index)
    asking: list[tuple[int, str, str]]
    known: dict[str, dict[str, Any]]
    previous: dict[str, dict[str, Any]]
    fmt: Format
    fingerprint: str
    storage_options: dict[str, Any] | None

    def settle(self) -> tuple[list[tuple[int, FileResult]], list[tuple[int, str, str]]]:
        """Ask about the sources of ``asking``: the rows of those up to date (or that cannot be stat'ed), with
        their positions, and the jobs of the others (changed)."""
        infos = current_infos([url for _, url, _ in self.asking], self.known, self.storage_options)
        rows: list[tuple[int, FileResult]] = []
        jobs: list[tuple[int, str, str]] = []
        for i, url, index in self.asking:
            now = infos.get(url)
            if isinstance(now, RefindexError):
                rows.append((i, FileResult(source=url, index=index, status="failed", error=" ".join(str(now).split()),
                                           options=self.fingerprint, finished=now_text(), seconds=0.0)))
                continue
            fresh = None if now is None else _up_to_date(url, index, now, self.previous.get(url), self.fmt,
                                                         self.fingerprint, self.storage_options)
            if fresh is None:
                jobs.append((i, url, index))
            else:
                rows.append((i, fresh))
        return rows, jobs


def plan_inputs(sources: list[str], known: dict[str, dict[str, Any]], previous: dict[str, dict[str, Any]],
                fmt: Format, output: str | None, root: str | None, fingerprint: str, force: bool,
                storage_options: dict[str, Any] | None) -> Plan:
    """Each input's index location, and whether it is a job now or its source must be asked (:class:`Plan`).

    Only inputs that may be up to date are asked at all (``known``: what the listings of the inputs
    said): an input without an index, or whose manifest row was made otherwise, is scanned anyway,
    and its scan reads its size and validators itself.  Whether indexes exist comes from a listing
    of their folder where it holds many of them."""
    indexes: dict[str, str] = {}
    for url in sources:
        index = index_location(url, fmt, output, root)
        if index in indexes:
            raise RefindexError(f"two inputs would share the index {index}: {indexes[index]} and {url}")
        indexes[index] = url
    where = {url: index for index, url in indexes.items()}
    every = [(i, url, where[url]) for i, url in enumerate(sources)]
    if force:
        return Plan([None] * len(sources), every, [], known, previous, fmt, fingerprint, storage_options)
    may = [job for job in every if _may_hold(previous.get(job[1]), job[2], fingerprint)]
    exists = _index_presence([index for _, _, index in may], fmt, storage_options)
    asking = [job for job in may if exists(job[2])]
    held = {i for i, _, _ in asking}
    return Plan([None] * len(sources), [job for job in every if job[0] not in held], asking, known, previous, fmt,
                fingerprint, storage_options)


def _may_hold(prev: dict[str, Any] | None, index: str, fingerprint: str) -> bool:
    """Could this manifest row (or, without one, the index's own provenance) show the input up to date?"""
    return prev is None or (prev.get("status") in ("indexed", "up_to_date") and prev.get("index") == index
                            and prev.get("options") == fingerprint)


def _index_presence(indexes: list[str], fmt: Format, storage_options: dict[str, Any] | None
                    ) -> Callable[[str], bool]:
    """``exists(index)``: from listings of the indexes' folders where they hold many (JSON indexes are
    objects a listing shows), else asked one by one."""
    seen = listed(indexes, storage_options) if fmt == "json" else {}

    def exists(index: str) -> bool:
        if index in seen:
            return seen[index] is not None and seen[index].get("type", "file") == "file"
        return _index_exists(index, fmt, storage_options)

    return exists


def _up_to_date(url: str, index: str, now: dict[str, Any], prev: dict[str, Any] | None, fmt: Format,
                fingerprint: str, storage_options: dict[str, Any] | None) -> FileResult | None:
    """The row of an input whose index is up to date (from the manifest, else the index itself), or None."""
    if prev is not None:
        if (_may_hold(prev, index, fingerprint)
                and source_unchanged(url, prev, now, storage_options,
                                     lambda: _index_provenance(index, fmt, storage_options))):
            return FileResult(**{**{k: prev.get(k) for k in FileResult.__dataclass_fields__},
                                 "status": "up_to_date", "seconds": 0.0, **_validators(now)})
        return None
    # no manifest row (first run with an existing index, or an interrupted run)
    prov = _index_provenance(index, fmt, storage_options)
    if prov is not None and source_unchanged(url, prov, now, storage_options, lambda: prov):
        return FileResult(source=url, index=index, status="up_to_date", size=prov.get("size"), seconds=0.0,
                          options=fingerprint, finished=now_text(), **_validators(now))
    return None


def _validators(now: dict[str, Any]) -> dict[str, Any]:
    """The manifest's validator columns of the source as it is now (unchanged, or the same bytes)."""
    return {"etag": now.get("etag"), "version": now.get("version"), "mtime": now.get("mtime")}
