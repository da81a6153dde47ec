"""Reading an index kept in an Icechunk repository (``refindex scan --format icechunk``).

A repository is recognised by its layout (a ``repo`` object at its root).  It is opened
read-only on a branch (default ``main``) or a snapshot, authorizing **exactly** the
virtual chunk containers its configuration declares — with the reader's storage options
for the sources — so its chunks cannot make the reader fetch from anywhere else.  The
file's group (``group``, default the root) is served as a zarr store of its own, so zarr,
hdmf-zarr's ``NWBZarrIO``, ``verify``, ``info`` and ``schema`` read it like any v3 index.
Its provenance is the record the committing scan left in the commit metadata.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Iterable

from ...errors import GroupNotFound, RefindexError
from ._repository import names_repository


def is_repository(target: Any, storage_options: dict[str, Any] | None = None) -> bool:
    """Is ``target`` an :class:`IcechunkIndex`, or a path or URL naming a repository (one ``exists`` for remote names)?"""
    return isinstance(target, IcechunkIndex) or names_repository(target, storage_options)


@dataclass
class IcechunkIndex:
    """One file's index in an Icechunk repository: which repository, group, branch or snapshot.

    ``storage_options`` reach the repository (s3fs-style); ``source_options`` the sources
    its containers point into (default: ``storage_options``).
    """

    repository: str
    group: str = ""
    branch: str | None = None
    snapshot: str | None = None
    storage_options: dict[str, Any] | None = None
    source_options: dict[str, Any] | None = None
    _session: Any = field(default=None, init=False, repr=False)
    _repo: Any = field(default=None, init=False, repr=False)
    _containers: list[str] = field(default_factory=list, init=False, repr=False)
    _record: dict[str, Any] | None = field(default=None, init=False, repr=False)

    @property
    def label(self) -> str:
        at = self.snapshot or self.branch or "main"
        return f"{self.repository}@{at}:/{self.group.strip('/')}"

    def open(self) -> Any:
        """The read-only session (opened once), every declared container authorized, nothing else."""
        if self._session is not None:
            return self._session
        import icechunk as ic

        from ...formats import icechunk as writer  # the repository layout: not needed to tell a JSON index apart

        ic.set_logs_filter("error")
        storage = writer.storage_of(self.repository, self.storage_options)
        options = self.storage_options if self.source_options is None else self.source_options
        try:
            config = ic.Repository.fetch_config(storage)
            self._containers = writer.declared_containers(config)
            creds = writer.credentials_for(self._containers, options) if self._containers else None
            self._repo = ic.Repository.open(storage, authorize_virtual_chunk_access=creds)
            if self.snapshot is not None:
                self._session = self._repo.readonly_session(snapshot_id=self.snapshot)
            else:
                self._session = self._repo.readonly_session(branch=self.branch or "main")
        except ic.IcechunkError as e:
            raise RefindexError(f"cannot open the Icechunk repository: {writer.said(e)}", file=self.label) from e
        return self._session

    @property
    def containers(self) -> list[str]:
        """The virtual chunk container prefixes the repository declares (what a reader authorizes)."""
        self.open()
        return list(self._containers)

    def store(self) -> Any:
        """A read-only zarr store whose root is the file's group."""
        base = self.group.strip("/")
        store = self.open().store
        return GroupStore(store, base) if base else store

    def zarr_group(self) -> Any:
        import zarr

        from ...codecs import register_codecs, register_stock_codecs, register_v3_codecs

        register_codecs()
        register_stock_codecs()
        register_v3_codecs()
        try:
            return zarr.open_group(self.store(), mode="r", zarr_format=3, use_consolidated=False)
        except (FileNotFoundError, zarr.errors.ContainsArrayError) as e:
            raise self.no_group() from e

    def no_group(self) -> GroupNotFound:
        """What stands at ``group`` instead of a group, and the groups of its nearest parent group."""
        import zarr

        store, path = self.open().store, self.group.strip("/")
        kinds: dict[str, str] = {}
        parent = path
        while parent:
            parent = parent.rpartition("/")[0]
            try:
                found = zarr.open_group(GroupStore(store, parent) if parent else store, mode="r", zarr_format=3,
                                        use_consolidated=False)
            except (FileNotFoundError, zarr.errors.ContainsArrayError):
                continue
            kinds[parent] = "group"
            for name, member in found.members():
                kinds[f"{parent}/{name}" if parent else name] = "group" if isinstance(member, zarr.Group) else "array"
            break
        at = self.snapshot or self.branch or "main"
        return GroupNotFound.naming(self.group, kinds, file=f"{self.repository}@{at}")

    def record(self) -> dict[str, Any]:
        """The provenance the last commit that wrote this group recorded ({} when none did)."""
        if self._record is not None:
            return self._record
        session = self.open()
        group = "/" + self.group.strip("/")
        self._record = {}
        for info in self._repo.ancestry(snapshot_id=session.snapshot_id):
            groups = ((info.metadata or {}).get("refindex") or {}).get("groups") or {}
            if group in groups:
                self._record = dict(groups[group])
                break
        return self._record

    def as_refs(self) -> dict[str, Any]:
        """The index's provenance shaped as a JSON index's (``{"refindex": ...}``), for freshness checks."""
        return {"refindex": self.record()}

    def documents(self) -> dict[str, dict[str, Any]]:
        """Every node's ``zarr.json`` under the group, keyed as in a v3 index (``"a/b/zarr.json"``)."""
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        store = self.store()
        root = self.zarr_group()
        paths = [""] + [p for p, _ in root.members(max_depth=None)]
        out = {}
        for p in sorted(paths):
            key = (p + "/" if p else "") + "zarr.json"
            buf = sync(store.get(key, prototype=default_buffer_prototype()))
            out[key] = json.loads(buf.to_bytes())
        return out


def icechunk_index(target: Any, *, storage_options: dict[str, Any] | None = None,
                   source_options: dict[str, Any] | None = None, group: str | None = None,
                   branch: str | None = None, snapshot: str | None = None,
                   groups_elsewhere: bool = False) -> IcechunkIndex | None:
    """``target`` as an :class:`IcechunkIndex` when it is one or names a repository, else None.

    ``groups_elsewhere``: the caller selects ``group`` in any other index itself (``refindex.open``),
    so only ``branch``/``snapshot`` need a repository; otherwise ``group`` does too."""
    if isinstance(target, IcechunkIndex):
        return target
    if not names_repository(target, storage_options):  # asked once: a remote name costs a request
        if branch is None and snapshot is None and (group is None or groups_elsewhere):
            return None
        why = "branch/snapshot name a version of one" if branch is not None or snapshot is not None else \
            "group= selects a file's index in one here (refindex.open(..., group=) opens a group of any index)"
        raise RefindexError(f"not an Icechunk repository: {why}", file=os.fspath(target))
    return IcechunkIndex(os.fspath(target), group=group or "", branch=branch, snapshot=snapshot,
                         storage_options=storage_options, source_options=source_options)


# ---------------------------------------------------------------------- a group as a store
def _make_group_store() -> type:
    """A read-only zarr store showing one group of another store as its root (keys prefixed)."""
    from zarr.abc.store import Store

    class _GroupStore(Store):
        supports_writes = False
        supports_deletes = False
        supports_listing = True
        supports_partial_writes = False

        def __init__(self, inner: Any, prefix: str):
            super().__init__(read_only=True)
            self.inner, self.prefix = inner, prefix.strip("/")

        def _key(self, key: str) -> str:
            return self.prefix + "/" + key if key else self.prefix

        def __eq__(self, other: object) -> bool:
            return isinstance(other, _GroupStore) and (other.inner, other.prefix) == (self.inner, self.prefix)

        def __str__(self) -> str:
            return f"{self.inner}/{self.prefix}"

        async def get(self, key: str, prototype: Any = None, byte_range: Any = None) -> Any:
            return await self.inner.get(self._key(key), prototype, byte_range)

        async def get_partial_values(self, prototype: Any, key_ranges: Iterable[tuple[str, Any]]) -> list[Any]:
            return await self.inner.get_partial_values(prototype, [(self._key(k), r) for k, r in key_ranges])

        async def exists(self, key: str) -> bool:
            return await self.inner.exists(self._key(key))

        async def set(self, key: str, value: Any) -> None:
            raise RefindexError("an Icechunk index is read-only here", file=str(self))

        async def delete(self, key: str) -> None:
            raise RefindexError("an Icechunk index is read-only here", file=str(self))

        async def list(self) -> AsyncIterator[str]:
            async for k in self.inner.list_prefix(self.prefix + "/"):
                yield k[len(self.prefix) + 1:]

        async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
            async for k in self.inner.list_prefix(self._key(prefix)):
                yield k[len(self.prefix) + 1:]

        async def list_dir(self, prefix: str) -> AsyncIterator[str]:
            async for k in self.inner.list_dir(self._key(prefix)):
                yield k

    return _GroupStore


_GROUP_STORE: type | None = None


def GroupStore(inner: Any, prefix: str) -> Any:  # noqa: N802 - a class built on first use (zarr loads late)
    """A read-only store whose root is the group ``prefix`` of ``inner``."""
    global _GROUP_STORE
    if _GROUP_STORE is None:
        _GROUP_STORE = _make_group_store()
    return _GROUP_STORE(inner, prefix)
