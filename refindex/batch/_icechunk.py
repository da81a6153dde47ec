"""Many files into one Icechunk repository: one group per file, one commit at the end.

Workers (local processes or Dask) only scan: each returns the file's prepared v3
:class:`~refindex.model.Tree`.  This coordinator writes every Tree that arrives into a
session *forked* from a pristine session of the branch and merges that fork into the
session it will commit, so a file whose write fails leaves nothing of itself behind (its
fork is dropped) and never stops the others.  Parent groups are created in the committed
session itself, before the merge (two forks creating one parent would conflict).

At the end one commit lands with every group's record in its metadata (the provenance of
a JSON index, plus ``input``: the batch's name for the source, and ``fingerprint``: the
scan options), the union of the container prefixes beside them; nothing is committed when
no file was written.  A re-run reads those records back (newest per group, groups still
present at the tip) and skips inputs whose source and options are unchanged.

Group names: each source's path relative to the inputs' common folder, every segment
reduced to ``[A-Za-z0-9._-]`` (zarr v3's portable node names; ``.``, ``..`` and names
starting ``__`` are changed too), made unique against every group the branch holds and
each other (no group inside another's: a re-scan replaces a group whole).  An input keeps
the group its record names on later runs.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from .. import urls
from ..errors import RefindexError
from ..formats import icechunk as writer
from ._manifest import now_text, source_unchanged
from ._results import FileResult

FORMAT = "icechunk"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


# ------------------------------------------------------------------ group names
def clean_segment(segment: str) -> str:
    """One path segment as a portable zarr node name."""
    name = _UNSAFE.sub("_", segment) or "_"
    if name in (".", "..") or name.startswith("__"):
        name = "_" + name.lstrip("_.") if name.strip("_.") else "_"
    return name


def group_name(source: str, root: str | None) -> str:
    """``/relative/path/of/source.h5`` below ``root``, each segment cleaned."""
    path = urls.split(source)[1]
    base = urls.split(root)[1] if root else ""
    rel = path[len(base):] if base and path.startswith(base) else path
    return "/" + "/".join(clean_segment(p) for p in rel.split("/") if p)


def _clashes(name: str, taken: set[str]) -> bool:
    """Equal to a taken group, above one or below one."""
    return any(name == t or name.startswith(t.rstrip("/") + "/") or t.startswith(name + "/") for t in taken)


def _numbered(name: str, i: int) -> str:
    head, _, leaf = name.rpartition("/")
    stem, dot, ext = leaf.partition(".")
    return f"{head}/{stem}-{i}{dot}{ext}"


def assign_groups(sources: list[str], root: str | None, records: dict[str, dict[str, Any]]) -> dict[str, str]:
    """A group per source: the one its record names, else a fresh collision-free name."""
    if "/" in records:
        src = (records["/"].get("source") or {}).get("url")
        raise RefindexError(f"the branch's root group holds the index of {src}: a batch's groups would go inside "
                            "it (use another branch or repository)")
    owned = {r["input"]: g for g, r in records.items() if r.get("input")}
    out = {s: owned[s] for s in sources if s in owned}
    taken = set(records) | set(out.values())
    for s in sources:
        if s in out:
            continue
        name, i = group_name(s, root), 1
        while _clashes(name, taken):
            i += 1
            name = _numbered(group_name(s, root), i)
        out[s] = name
        taken.add(name)
    return out


# ------------------------------------------------------------------ planning
def plan_groups(sources: list[str], infos: dict[str, Any], records: dict[str, dict[str, Any]],
                groups: dict[str, str], repo: str, fingerprint: str, force: bool,
                storage_options: dict[str, Any] | None = None) -> tuple[list[FileResult | None], list[tuple[int, str, str]]]:
    """Per input: a finished row (up to date / cannot stat) or a job (position, source, group).

    A group is up to date when its commit record's source passes the freshness check every
    reader uses (validators, else the content fingerprint it recorded)."""
    rows: list[FileResult | None] = []
    jobs: list[tuple[int, str, str]] = []
    for i, url in enumerate(sources):
        group, now = groups[url], infos[url]
        if isinstance(now, RefindexError):
            rows.append(FileResult(source=url, index=repo, group=group, status="failed", seconds=0.0,
                                   error=" ".join(str(now).split()), options=fingerprint, finished=now_text()))
            continue
        rec = records.get(group) or {}
        if (not force and rec.get("input") == url and rec.get("fingerprint") == fingerprint
                and source_unchanged(url, rec.get("source") or {}, now, storage_options, lambda: rec.get("source"))):
            src, counts = rec["source"], rec.get("counts") or {}
            rows.append(FileResult(source=url, index=repo, group=group, status="up_to_date", size=src.get("size"),
                                   etag=now.get("etag"), mtime=now.get("mtime"), version=now.get("version"),
                                   arrays=counts.get("arrays"),
                                   chunks=counts.get("chunks_referenced"), inline_chunks=counts.get("inline_chunks"),
                                   seconds=0.0, options=fingerprint, finished=now_text()))
            continue
        rows.append(None)
        jobs.append((i, url, group))
    return rows, jobs


# ------------------------------------------------------------------ the coordinator
@dataclass
class IcechunkBatch:
    """One batch's repository, branch and sessions; writes each arriving Tree, commits once."""

    target: writer.IcechunkTarget
    version: str
    repo: Any = None
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # what the branch holds now
    written: dict[str, dict[str, Any]] = field(default_factory=dict)  # group -> record, this batch
    snapshot: str | None = None
    _session: Any = None
    _pristine: Any = None

    def open(self, sources: list[str]) -> None:
        """The repository (created if missing), declaring a container for each source's prefix."""
        prefixes = {writer.container_prefix(writer.location_of(s)) for s in sources}
        self.repo = writer.open_repository(self.target, prefixes)
        self.records = writer.latest_records(self.repo, self.target.branch)

    def _sessions(self) -> tuple[Any, Any]:
        if self._session is None:
            self._session = writer.writable_session(self.repo, self.target)
            self._pristine = writer.writable_session(self.repo, self.target)
        return self._session, self._pristine

    def take(self, row: dict[str, Any], tree: Any) -> dict[str, Any]:
        """Write ``tree`` as ``row``'s group (a fork merged in); the row with counts, or failed."""
        import icechunk as ic

        t0 = time.perf_counter()
        group = row["group"]
        try:
            missing = writer.prefixes_of(tree) - set(writer.declared_containers(self.repo.config))
            if missing:  # chunks outside the sources' folders (external storage, VDS sources)
                self.repo = writer.open_repository(self.target, missing)
            session, pristine = self._sessions()
            fork = pristine.fork()
            counts = writer.write_tree(fork.store, tree, group, parents=False)
            pages = writer.write_pages(self.target.repo, self.target.storage_options, tree.pages)
            writer.write_parents(session.store, group)
            session.merge(fork)
        except RefindexError as e:
            return _failed(row, RefindexError(e.reason, file=tree.url, path=e.path), t0)
        except ic.IcechunkError as e:
            return _failed(row, RefindexError(f"Icechunk refused the write: {writer.said(e)}", file=tree.url), t0)
        self.written[group] = writer.group_record(tree, counts, pages) | {"input": row["source"],
                                                                          "fingerprint": row["options"]}
        return {**row, "arrays": counts["arrays"], "chunks": counts["chunks_referenced"],
                "inline_chunks": counts["inline_chunks"], "index_bytes": counts["inline_bytes"],
                "seconds": round((row.get("seconds") or 0.0) + time.perf_counter() - t0, 4)}

    def commit(self) -> str | None:
        """One commit of every group written (None, and nothing committed, when none was)."""
        if not self.written:
            return None
        containers = sorted({c for r in self.written.values() for c in r["containers"]})
        self.snapshot = writer.commit(self._session, self.written, self.version, self.target.repo,
                                      extra={"containers": containers, "batch": True})
        return self.snapshot


def _failed(row: dict[str, Any], e: RefindexError, t0: float) -> dict[str, Any]:
    return {**row, "status": "failed", "error": " ".join(str(e).split()), "arrays": None, "chunks": None,
            "inline_chunks": None, "index_bytes": None,
            "seconds": round((row.get("seconds") or 0.0) + time.perf_counter() - t0, 4)}


def not_committed(rows: list[FileResult | None], why: BaseException) -> None:
    """Rows this batch wrote but never committed become failures saying so."""
    text = " ".join(str(why).split()) or type(why).__name__
    for r in rows:
        if r is not None and r.status == "indexed":
            r.status, r.error = "failed", f"not committed (nothing of this batch was): {text}"
