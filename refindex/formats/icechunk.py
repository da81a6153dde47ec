"""The index as an Icechunk repository: zarr v3 documents, virtual chunk references, one commit.

Icechunk (a transactional, versioned zarr v3 store) holds the documents of a v3 index
(:func:`refindex.formats.v3.hierarchy`) with the chunk references as *virtual* chunks: a
reader fetches them from the source through one of the repository's virtual chunk
containers (URL prefixes declared in its configuration, each authorized by the reader).
Inline data becomes native chunks.

A write is one session and one commit: nothing reaches the branch unless every document
and chunk went in.  A writer that finds the branch moved meanwhile (another scan into
another group of the same repository) rebases; when the rebase finds a conflict (both
created the same parent group, say) the whole write is redone on the new tip, so
concurrent writers all land, one after the other, or fail with
:class:`~refindex.errors.RefindexError` naming the conflict — never half-written.

Provenance lives in the commit metadata (``{"refindex": {"groups": {"/g": provenance}}}``)
because Icechunk holds zarr keys only, and the group's own attributes are the file's.  The
index's pages (:mod:`refindex.formats.pages`: up to a few MB) would make every later reader
of the ancestry load them: they are an object of their own in the repository's folder,
``refindex-pages/<sha256>.json``, written before the commit and named (with its digest) in
the group's record.  Named by content, it is never overwritten with other bytes; a failed
commit leaves an unnamed object, which nothing reads.
icechunk is imported inside the functions: ``import refindex`` never loads it.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Iterable
from urllib.parse import quote, urlsplit

import numpy as np

from .. import urls
from ..errors import RefindexError
from ..model import ChunkTable, Pages, Tree
from . import v3
from .pages import pages_document

DENSE_SHARE = 0.25  # chunk tables filling at least this share of their grid go in as whole columns
DENSE_MAX = 1 << 26  # ... unless the grid is larger than this (then in batches of chunk specs)
BATCH = 50_000  # chunk specs per call
IN_FLIGHT = 128  # native keys written at once: each ``set`` wakes the event loop from Icechunk's own
# threads, and tens of thousands of them pending at once wrote 2x slower than rounds of ~100
# (20,000 inline chunks: 4.9 s all at once, 2.4-2.8 s in rounds of 64-128, 3.9 s of 8)
TRIES = 4  # whole-write attempts when a concurrent commit conflicts
FORMAT = "icechunk"
PAGES_FOLDER = "refindex-pages"


# ---------------------------------------------------------------------- where things are
def location_of(url: str) -> str:
    """A chunk's source as Icechunk stores it: an absolute URL, percent-encoded (``#``, ``%``, spaces
    would otherwise be read as URL syntax and the chunk not found)."""
    if urls.is_local(url):
        return "file://" + quote(os.path.realpath(urls.split(url)[1]))
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{quote(parts.path)}"


def container_prefix(location: str) -> str:
    """The virtual chunk container a location belongs to: its folder (``file://``), its bucket
    (``s3://``, ``gs://``), its host (``http(s)://``).  Always ends with ``/``: Icechunk
    drops containers it finds malformed without an error."""
    parts = urlsplit(location)
    if parts.scheme == "file":
        return f"file://{parts.path.rsplit('/', 1)[0]}/"
    return f"{parts.scheme}://{parts.netloc}/"


def _table_urls(table: ChunkTable, own: str) -> list[str]:
    names, _ = table.row_urls()
    return [own if u is None else u for u in names]


def prefixes_of(tree: Tree) -> set[str]:
    """The container prefixes the tree's chunk references need."""
    out: set[str] = set()
    for a in tree.arrays.values():
        if a.refs is not None and len(a.refs):
            out.update(container_prefix(location_of(u)) for u in _table_urls(a.refs, tree.url))
    return out


def s3_settings(storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """s3fs-style storage options -> the keywords Icechunk's S3 store and storage share."""
    so = dict(storage_options or {})
    client = dict(so.get("client_kwargs") or {})
    out: dict[str, Any] = {}
    endpoint = so.get("endpoint_url") or client.get("endpoint_url")
    if endpoint:
        out.update(endpoint_url=endpoint, allow_http=endpoint.startswith("http://"), force_path_style=True)
    out["region"] = client.get("region_name") or so.get("region") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return out


def s3_credentials(storage_options: dict[str, Any] | None) -> Any:
    """Icechunk S3 credentials from s3fs-style options (``anon``, ``key``/``secret``/``token``, else the environment)."""
    import icechunk as ic

    so = storage_options or {}
    if so.get("anon"):
        return ic.s3_anonymous_credentials()
    if so.get("key") and so.get("secret"):
        return ic.s3_static_credentials(access_key_id=so["key"], secret_access_key=so["secret"],
                                        session_token=so.get("token"))
    return ic.s3_from_env_credentials()


def container_of(prefix: str, storage_options: dict[str, Any] | None) -> tuple[Any, Any]:
    """(VirtualChunkContainer, credentials) for ``prefix``, its sources read with ``storage_options``."""
    import icechunk as ic
    import icechunk.credentials as iccred

    scheme = prefix.split("://", 1)[0]
    if scheme == "file":
        return ic.VirtualChunkContainer(prefix, ic.local_filesystem_store(prefix[len("file://"):])), \
            iccred.LocalFileSystemAccess
    if scheme in ("s3", "s3a"):
        s3 = s3_settings(storage_options)
        store = ic.s3_store(region=s3["region"], endpoint_url=s3.get("endpoint_url"),
                            allow_http=s3.get("allow_http", False), s3_compatible="endpoint_url" in s3,
                            force_path_style=s3.get("force_path_style", False))
        return ic.VirtualChunkContainer(prefix, store), s3_credentials(storage_options)
    if scheme in ("http", "https"):
        return ic.VirtualChunkContainer(prefix, ic.http_store()), iccred.HttpAccess
    if scheme in ("gs", "gcs"):
        return ic.VirtualChunkContainer(prefix, ic.gcs_store()), ic.gcs_from_env_credentials()
    raise RefindexError(f"Icechunk has no virtual chunk container for {scheme}:// sources", file=prefix)


def credentials_for(prefixes: Iterable[str], storage_options: dict[str, Any] | None) -> Any:
    """Credentials for exactly these container prefixes (what a repository declares, nothing more)."""
    import icechunk as ic

    return ic.containers_credentials({p: container_of(p, storage_options)[1] for p in prefixes})


def storage_of(repo: str, storage_options: dict[str, Any] | None) -> Any:
    """Where the repository lives: a local folder, or ``s3://bucket/prefix`` (s3fs-style options)."""
    import icechunk as ic

    if urls.is_local(repo):
        return ic.local_filesystem_storage(urls.split(repo)[1])
    parts = urlsplit(repo)
    if parts.scheme not in ("s3", "s3a") or not parts.path.strip("/"):
        raise RefindexError("an Icechunk repository is a local folder or s3://bucket/prefix", file=repo)
    s3 = s3_settings(storage_options)
    so = storage_options or {}
    secret = bool(so.get("key") and so.get("secret"))
    return ic.s3_storage(bucket=parts.netloc, prefix=parts.path.strip("/"), region=s3["region"],
                         endpoint_url=s3.get("endpoint_url"), allow_http=s3.get("allow_http", False),
                         force_path_style=s3.get("force_path_style", False),
                         access_key_id=so.get("key") if secret else None,
                         secret_access_key=so.get("secret") if secret else None,
                         session_token=so.get("token") if secret else None,
                         anonymous=True if so.get("anon") else None,
                         from_env=None if secret or so.get("anon") else True)


def declared_containers(config: Any) -> list[str]:
    """The virtual chunk container prefixes a repository configuration declares."""
    return sorted((getattr(config, "virtual_chunk_containers", None) or {}).keys())


# ---------------------------------------------------------------------- the repository
@dataclass
class IcechunkTarget:
    """Where a scan goes: the repository (local folder or ``s3://bucket/prefix``), a branch, a group in it.

    ``storage_options``: how the repository itself is reached (s3fs-style); ``source_options``:
    how the sources are (the scan's), which decide the containers' stores and credentials.
    """

    repo: str
    branch: str = "main"
    group: str = ""
    storage_options: dict[str, Any] | None = None
    source_options: dict[str, Any] | None = None

    @property
    def base(self) -> str:
        return self.group.strip("/")


def open_repository(target: IcechunkTarget, prefixes: set[str]) -> Any:
    """The repository of ``target`` (created if missing), declaring a container for each prefix.

    A container missing from an existing repository is added to its saved configuration;
    the writer authorizes every container the repository declares.
    """
    import icechunk as ic

    ic.set_logs_filter("error")
    storage = storage_of(target.repo, target.storage_options)
    try:
        fresh = not ic.Repository.exists(storage)
        config = (None if fresh else ic.Repository.fetch_config(storage)) or ic.RepositoryConfig.default()
        missing = prefixes - set(declared_containers(config))
        for prefix in sorted(missing):
            config.set_virtual_chunk_container(container_of(prefix, target.source_options)[0])
        creds = credentials_for(set(declared_containers(config)) | prefixes, target.source_options)
        if fresh:
            try:
                return ic.Repository.create(storage, config=config, authorize_virtual_chunk_access=creds)
            except ic.AlreadyExistsError:  # another writer created it meanwhile: take theirs
                return open_repository(target, prefixes)
        repo = ic.Repository.open(storage, config=config, authorize_virtual_chunk_access=creds)
        if missing:
            repo.save_config()
        return repo
    except ic.IcechunkError as e:
        raise RefindexError(f"cannot open or create the Icechunk repository: {said(e)}", file=target.repo) from e


def writable_session(repo: Any, target: IcechunkTarget) -> Any:
    """A writable session on ``target.branch``; a branch that does not exist yet starts at main's tip."""
    import icechunk as ic

    try:
        if target.branch not in repo.list_branches():
            repo.create_branch(target.branch, repo.lookup_branch("main"))
        return repo.writable_session(target.branch)
    except ic.IcechunkError as e:
        raise RefindexError(f"cannot write branch {target.branch!r}: {said(e)}", file=target.repo) from e


# ---------------------------------------------------------------------- writing
def non_finite_attributes(doc: dict[str, Any]) -> list[str]:
    """Attribute names of ``doc`` holding NaN or an infinity: Icechunk accepts strict JSON only
    (zarr and hdmf-zarr write them as bare ``NaN`` tokens, which Icechunk rejects)."""
    bad = []
    for name, value in (doc.get("attributes") or {}).items():
        try:
            json.dumps(value, allow_nan=False)
        except ValueError:
            bad.append(name)
    return bad


def join(*parts: str) -> str:
    """A zarr key from parts ("" parts and stray slashes dropped)."""
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


def grid_of(doc: dict[str, Any]) -> tuple[int, ...]:
    """The chunk grid shape of an array document."""
    chunks = doc["chunk_grid"]["configuration"]["chunk_shape"]
    return tuple(-(-int(s) // int(c)) for s, c in zip(doc["shape"], chunks))


def write_refs(store: Any, array_path: str, table: ChunkTable, grid: tuple[int, ...], own_url: str) -> None:
    """One array's chunk references: column-wise (``set_virtual_refs_arr``) where the table fills
    much of its grid, else in batches of chunk specs.  A reference Icechunk refuses fails the write."""
    import icechunk as ic

    names, which = table.row_urls()
    locations = [location_of(own_url if u is None else u) for u in names]
    total = math.prod(grid) if grid else 1
    if grid and DENSE_SHARE * total <= len(table) and total <= DENSE_MAX:
        flat = np.ravel_multi_index(tuple(table.coords[:, :len(grid)].T), grid)
        offsets = np.zeros(total, np.uint64)
        lengths = np.zeros(total, np.uint64)
        offsets[flat], lengths[flat] = table.offsets, table.sizes
        column = np.full(total, "", dtype=object)  # "": no chunk there
        column[flat] = np.asarray(locations, dtype=object)[which]
        failed = store.set_virtual_refs_arr(array_path, grid, column.tolist(), offsets, lengths) or []
    else:
        failed = []
        for start in range(0, len(table), BATCH):
            stop = min(len(table), start + BATCH)
            specs = [ic.VirtualChunkSpec(index=c, location=locations[w], offset=o, length=n)
                     for c, w, o, n in zip(table.coords[start:stop].tolist(), which[start:stop].tolist(),
                                           table.offsets[start:stop].tolist(), table.sizes[start:stop].tolist())]
            failed += store.set_virtual_refs(array_path, specs) or []
    if failed:
        raise RefindexError(f"{len(failed)} chunk reference(s) lie outside every virtual chunk container of the "
                            f"repository (first: chunk {list(failed[0])})", path="/" + array_path)


def write_native(store: Any, items: list[tuple[str, bytes]]) -> None:
    """Documents and inline chunks: ``IN_FLIGHT`` ``set`` calls at a time, in one event-loop run."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    proto = default_buffer_prototype()

    async def put() -> None:
        for start in range(0, len(items), IN_FLIGHT):
            await asyncio.gather(*(store.set(k, proto.buffer.from_bytes(v)) for k, v in items[start:start + IN_FLIGHT]))

    if items:
        sync(put())


def document_bytes(doc: dict[str, Any], where: str) -> bytes:
    """A ``zarr.json`` as strict JSON (Icechunk's parser refuses NaN tokens); a NaN left here is a bug upstream."""
    try:
        return json.dumps(doc, allow_nan=False, sort_keys=True).encode()
    except ValueError as e:
        raise RefindexError(f"a document Icechunk cannot hold (NaN or infinity): {e}", path="/" + where) from e


def missing_parents(store: Any, group: str) -> list[tuple[str, bytes]]:
    """The documents of the parent groups of ``group`` the store lacks (empty groups)."""
    from zarr.core.sync import sync

    parts = group.strip("/").split("/") if group.strip("/") else []
    items = []
    for i in range(len(parts)):
        key = join(*parts[:i], "zarr.json")
        if not sync(store.exists(key)):
            items.append((key, document_bytes(v3.group_document({}), key)))
    return items


def write_parents(store: Any, group: str) -> None:
    """Create the parent groups of ``group`` the store lacks."""
    write_native(store, missing_parents(store, group))


def write_tree(store: Any, tree: Tree, group: str, *, parents: bool = True) -> dict[str, int]:
    """Write the v3 index of ``tree`` under ``group`` of a writable session's store; counts.

    Whatever the group held is replaced whole (a re-scan never merges with an old one);
    parent groups the repository lacks are created empty (``parents=False``: left to the
    caller, as a batch does for sessions it merges: two forks creating one parent conflict).
    Every document is serialised before the store is touched, so a document Icechunk cannot
    hold fails with nothing written.
    """
    from zarr.core.sync import sync

    h = v3.hierarchy(tree)
    base = group.strip("/")
    documents = [(join(base, path, "zarr.json"), document_bytes(doc, join(base, path)))
                 for path, doc in h.documents.items()]
    if base and sync(store.exists(join(base, "zarr.json"))):
        sync(store.delete_dir(base))
    elif not base and sync(store.exists("zarr.json")):
        sync(store.delete_dir(""))
    items: list[tuple[str, bytes]] = missing_parents(store, base) if parents else []
    items += documents
    write_native(store, items)  # every node first: a chunk is refused for a node not created yet
    chunks = [(join(base, path, key), data) for path, arr in h.arrays.items() for key, data in arr.inline.items()]
    write_native(store, chunks)
    referenced = nbytes = 0
    for path, arr in h.arrays.items():
        if arr.refs is not None:
            write_refs(store, join(base, path), arr.refs, grid_of(h.documents[path]), tree.url)
            referenced += len(arr.refs)
            nbytes += arr.refs.nbytes_referenced
    return {"arrays": len(h.arrays), "chunks_referenced": referenced, "bytes_referenced": nbytes,
            "inline_chunks": len(chunks), "inline_bytes": sum(len(d) for _, d in chunks)}


def group_record(tree: Tree, counts: dict[str, int], pages: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a commit records of one group: the index's provenance, the containers it reads, its counts,
    and where its pages are (``pages``: what :func:`write_pages` returned)."""
    record = {k: v for k, v in v3.provenance(tree).items() if k != "pages"}
    return record | {"containers": sorted(prefixes_of(tree)), "counts": dict(counts)} | (
        {"pages": pages} if pages else {})


def write_pages(repo: str, storage_options: dict[str, Any] | None, pages: Pages | None) -> dict[str, Any] | None:
    """Store ``pages`` as an object of their own in the repository (see the module docstring);
    what the group's record names: ``{"object", "sha256", "bytes"}``.  None when there are none."""
    if pages is None:
        return None
    import hashlib

    data = json.dumps(pages_document(pages), sort_keys=True).encode()
    digest = hashlib.sha256(data).hexdigest()
    name = f"{PAGES_FOLDER}/{digest}.json"
    fs, root = urls.filesystem(repo, storage_options)
    where = root.rstrip("/") + "/" + name
    try:
        if not fs.exists(where):
            if urls.is_local(repo):
                os.makedirs(os.path.dirname(where), exist_ok=True)
            fs.pipe_file(where, data)
    except Exception as e:  # noqa: BLE001 - any backend's failure to write
        raise RefindexError(f"cannot write the index's pages into the repository: {e}", file=repo) from e
    return {"object": name, "sha256": digest, "bytes": len(data)}


def read_pages(repo: str, storage_options: dict[str, Any] | None, named: dict[str, Any]) -> dict[str, Any]:
    """The pages document a group's record names (``named``), checked against its digest."""
    import hashlib

    fs, root = urls.filesystem(repo, storage_options)
    name = str(named.get("object") or "")
    if not name.startswith(PAGES_FOLDER + "/") or ".." in name:
        raise RefindexError(f"the record names pages outside {PAGES_FOLDER}/: {name!r}", file=repo)
    try:
        data = fs.cat_file(root.rstrip("/") + "/" + name)
    except Exception as e:  # noqa: BLE001
        raise RefindexError(f"cannot read the index's pages ({name}): {e}", file=repo) from e
    if hashlib.sha256(data).hexdigest() != named.get("sha256"):
        raise RefindexError(f"the index's pages ({name}) do not match their digest", file=repo)
    return json.loads(data)


def commit_message(records: dict[str, dict[str, Any]], version: str) -> str:
    """A commit message naming each source with its size, etag and mtime, and refindex's version."""
    said = []
    for group, prov in records.items():
        src = prov.get("source") or {}
        facts = ", ".join(f"{k} {src[k]}" for k in ("size", "etag", "mtime") if src.get(k) is not None)
        said.append(f"{src.get('url')} ({facts}) -> {group}")
    head = said[0] if len(said) == 1 else f"{len(said)} files"
    return f"refindex {version}: index {head}" + ("" if len(said) == 1 else "\n" + "\n".join(said))


def commit(session: Any, records: dict[str, dict[str, Any]], version: str, repo: str,
           extra: dict[str, Any] | None = None) -> str:
    """Commit the session with every group's record in its metadata (and ``extra`` beside them);
    a conflict the rebase cannot solve raises :class:`Conflict` (nothing committed)."""
    import icechunk as ic

    metadata = {"refindex": {"refindex_version": version, **(extra or {}), "groups": records}}
    try:
        return session.commit(commit_message(records, version), metadata=metadata,
                              rebase_with=ic.ConflictDetector())
    except (ic.ConflictError, ic.RebaseFailedError) as e:
        raise Conflict(f"another commit changed the same nodes meanwhile; nothing was committed ({said(e)})",
                       file=repo) from e


class Conflict(RefindexError):
    """A concurrent commit touched the same nodes and the rebase could not reconcile them."""


def said(e: Exception) -> str:
    """The first line of an Icechunk error (the rest is its Rust call context)."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def write_icechunk(tree: Tree, target: IcechunkTarget, *, version: str = "") -> dict[str, Any]:
    """Write the v3 index of ``tree`` into ``target``'s group and commit once; returns a summary.

    A conflicting concurrent commit makes the write start again from the new tip (up to
    :data:`TRIES` times).  Any failure leaves the branch as it was.
    """
    import icechunk as ic

    group = "/" + target.base
    repo = open_repository(target, prefixes_of(tree))
    pages = write_pages(target.repo, target.storage_options, tree.pages)
    for attempt in range(TRIES):
        session = writable_session(repo, target)
        try:
            counts = write_tree(session.store, tree, target.base)
        except RefindexError as e:
            raise RefindexError(e.reason, file=tree.url, path=e.path) from e
        except ic.IcechunkError as e:
            raise RefindexError(f"Icechunk refused the write: {said(e)}", file=tree.url) from e
        records = {group: group_record(tree, counts, pages)}
        try:
            snapshot = commit(session, records, version, target.repo)
            break
        except Conflict:
            if attempt == TRIES - 1:
                raise
    return {"format": FORMAT, "zarr_format": v3.ZARR_FORMAT, "snapshot": snapshot, "branch": target.branch,
            "repository": target.repo, "group": group, "containers": records[group]["containers"],
            "skipped": list(tree.skipped), "source": dict(records[group].get("source") or {}), **counts}


def latest_records(repo: Any, branch: str) -> dict[str, dict[str, Any]]:
    """The record of every group the tip of ``branch`` holds, from the newest commit that wrote it.

    A group counts only while it still exists at the tip and no newer commit replaced a group
    above it (a scan into ``/a`` replaces everything under ``/a``).  {} for a missing branch.
    """
    from zarr.core.sync import sync

    if branch not in repo.list_branches():
        return {}
    store = repo.readonly_session(branch=branch).store
    out: dict[str, dict[str, Any]] = {}
    replaced: set[str] = set()  # groups a newer commit wrote: what lies under them is that commit's
    for info in repo.ancestry(branch=branch):
        groups = ((info.metadata or {}).get("refindex") or {}).get("groups") or {}
        for group, record in groups.items():
            under = any(group == r or group.startswith(r.rstrip("/") + "/") for r in replaced)
            if not under and isinstance(record, dict):
                out[group] = record
        replaced.update(groups)
    return {g: r for g, r in out.items() if sync(store.exists(join(g, "zarr.json")))}
