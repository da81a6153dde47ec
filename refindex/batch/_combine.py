"""One dataset of many files, with xarray's meaning: ``refindex batch --combine``.

The combined index opened with xarray's defaults is what ``xr.open_mfdataset(files,
combine="by_coords")`` (or ``combine="nested", concat_dim=D``) gives over the files, or the
combine refuses with a :class:`~refindex.errors.RefindexError` naming the files and the
difference.  It streams: :class:`Combiner` takes each file's result as the batch finishes
it, keeps numpy columns of its chunks and a few facts about it (:mod:`._combine_plan`), and
writes the one index at the end (:mod:`._combine_write`): JSON for a ``*.json`` output,
fsspec's parquet references otherwise.  The pieces: :mod:`._combine_digest` (what is read of
a file's index), :mod:`._combine_checks` (the refusals), :mod:`._combine_times` (the concat
coordinate decoded per file and encoded once), :mod:`._combine_layout` (the arrays at the end).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .. import urls
from ..errors import RefindexError
from ..source import content_etag, etag_follows_content, read_whole
from ._combine_digest import digest
from ._combine_plan import Combination
from ._combine_state import identity_of, index_identity
from ._combine_write import is_json, write_combined
from ._results import BatchReport, FileResult

MODES = ("by_coords", "nested")
READERS = 8  # threads reading the files' indexes (and coordinate bytes) while the batch runs
IN_FLIGHT = 64  # digests waiting to join the combination, at most


def exists(source: str, storage_options: dict[str, Any] | None) -> bool:
    fs, path = urls.filesystem(source, storage_options)
    try:
        return bool(fs.exists(path))
    except Exception:  # noqa: BLE001 - unreachable is not gone: say nothing
        return True


def warm_up() -> None:
    """Import xarray's CF time coding and zarr's v2 metadata in a thread: new files' values are read and
    their times decoded with them."""
    import threading

    from ._combine_times import cf_times

    def load() -> None:
        try:
            cf_times()
            import zarr.core.metadata.v2  # noqa: F401
        except Exception:  # noqa: BLE001 - the combine says it when it needs them
            pass

    threading.Thread(target=load, name="refindex-combine-import", daemon=True).start()


def read_digest(source: str, index: str, dim: str, storage_options: dict[str, Any] | None
                ) -> tuple[dict[str, Any] | None, Any]:
    """The file's digest, and which index it was read from (kept in the state): on a store whose ETag is the
    MD5 of an object's bytes (S3), the size and that MD5 of the bytes read, no request more; else its size and
    ETag/mtime taken just before reading it (a stat, or a HEAD)."""
    protocol = urls.split(index)[0]
    if not etag_follows_content(protocol):
        return index_identity(index, storage_options), digest(source, index, dim, storage_options)
    read: Future = Future()
    identity = None
    try:
        data = read_whole(*urls.filesystem(index, storage_options))
    except Exception as e:  # noqa: BLE001 - the index reader says what it was (missing, refused...)
        read.set_exception(e)
    else:
        read.set_result(data)
        identity = {"size": len(data), "etag": content_etag(protocol, data)}
    return identity, digest(source, index, dim, storage_options, read)


def concat_dim_of(concat_dims: Sequence[str]) -> str:
    dims = list(concat_dims)
    if len(dims) != 1:
        raise RefindexError(f"--combine concatenates along one dimension, got {dims}")
    return dims[0]


class Combiner:
    """Takes per-file results as they arrive; :meth:`finish` writes the combined index.

    Each file's index is read in one of a few threads (a remote index or coordinate is a
    request: several in flight, not one after another), and its digest joins the combination
    in the caller's thread; at most ``IN_FLIGHT`` digests wait at any time.
    """

    def __init__(self, output: str | os.PathLike, *, concat_dims: Sequence[str] = ("time",), mode: str = "by_coords",
                 storage_options: dict[str, Any] | None = None, record_size: int | None = None,
                 icechunk: Any = None):
        if mode not in MODES:
            raise RefindexError(f"unknown combine mode {mode!r} ({' or '.join(MODES)})")
        self.output = urls.normalise(os.fspath(output))
        self.dim = concat_dim_of(concat_dims)
        self.storage_options, self.record_size = storage_options, record_size
        self.combination = Combination(self.dim, mode)
        self.failed: list[str] = []
        self.error: RefindexError | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.pending: deque[tuple[Future, FileResult, int]] = deque()
        self.icechunk = icechunk  # an IcechunkTarget: the dataset goes into its repository (one commit)
        self.sources: list[str] = []
        self.snapshot: str | None = None
        self.mode = mode
        self.state: Any = None  # the state this run saves (a StateBuilder), once prepare() is called
        self.saved: Any = None  # the previous run's state when it matches (a SavedState)
        self.header: dict[str, Any] = {}
        self.state_url = ""
        self.stats: dict[str, Any] = {"state": None, "indexes_read": 0, "from_state": 0}
        self.indexes_now: dict[str, Any] = {}  # index -> its identity now, for the saved files up to date

    def add(self, result: FileResult, position: int) -> None:
        """One file's result (``position``: its place among the inputs, the order of ``nested``)."""
        self.sources.append(result.source)
        if result.status == "failed":
            self.failed.append(result.source)
            return
        if self.error is not None:
            return  # refused already: the batch goes on, the combine will not be written
        now = self.indexes_now.get(result.index)
        saved = self.saved.digest_of(result, self.dim, now) if self.saved is not None else None
        if saved is not None:  # unchanged since the saved combine: its digest, no read of its index
            job: Future = Future()
            job.set_result((now, saved))
            self.stats["from_state"] += 1
        else:
            if self.pool is None:
                self.pool = ThreadPoolExecutor(READERS, thread_name_prefix="refindex-combine")
            job = self.pool.submit(read_digest, result.source, result.index, self.dim, self.storage_options)
            self.stats["indexes_read"] += 1
        self.pending.append((job, result, position))
        self.take(wait=len(self.pending) > IN_FLIGHT)

    def take(self, wait: bool) -> None:
        """Join the digests that are ready (``wait``: the oldest one too, or all when finishing)."""
        while self.pending and (wait or self.pending[0][0].done()):
            job, result, position = self.pending.popleft()
            wait = wait and len(self.pending) > IN_FLIGHT
            try:
                if self.error is None:
                    index, d = job.result()
                    self.combination.add(d, position)
                    if self.state is not None:
                        self.state.add(d, identity_of(result, index), result.index, self.dim)
            except RefindexError as e:
                self.error = e
            except Exception as e:  # noqa: BLE001 - a refindex bug must not stop the batch; the combine says it
                self.error = RefindexError(f"internal error while combining: {type(e).__name__}: {e}",
                                           file=result.source)

    def close(self) -> None:
        """No reader thread outlives the batch (the digests already asked for are finished, and kept)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None

    def finish(self) -> str:
        """Write the combined index (or raise why not); returns where."""
        while self.pending:
            self.take(wait=True)
        self.close()
        if self.failed:
            raise RefindexError(f"cannot combine: {len(self.failed)} input(s) failed ({', '.join(self.failed[:5])})")
        if self.error is not None:
            raise self.error
        out = self.combination.finish()
        if self.icechunk is not None:
            from ._combine_icechunk import write_combined_icechunk

            self.snapshot = write_combined_icechunk(out, self.icechunk, self.sources)
        else:
            write_combined(out, self.output, self.storage_options, self.record_size)
        if self.state is not None:
            self.state.save(self.state_url, {**self.header, "output": self.output_now()}, self.storage_options)
        return self.output

    # ------------------------------------------------------------------ the saved state (appends)
    def finish_into(self, report: BatchReport) -> BatchReport:
        """:meth:`finish`, and the report says where, which Icechunk snapshot, and what the combine read."""
        report.combined = self.finish()
        report.extra.update(snapshot=self.snapshot, combine=self.stats)
        return report

    def prepare(self, fingerprint: str, sources: list[str], force: bool, previous: dict[str, Any]) -> None:
        """Before the batch: load the previous run's state when it matches (else say why and combine in full),
        refuse when an input it held (or, for Icechunk, the manifest's) is gone, and start this run's state
        (see :mod:`._combine_state`)."""
        from ._combine_state import StateBuilder, check_vanished, header_of, load_state, refused, state_location

        self.check_inputs(previous, sources)
        kind = "icechunk" if self.icechunk is not None else "json" if is_json(self.output) else "parquet"
        self.header = header_of(fingerprint, self.dim, self.mode, kind)
        self.state_url = state_location(self.output, self.icechunk is not None)
        self.state = StateBuilder()
        if force:
            self.stats["state"] = "not used (--force)"
            return
        self.saved, why = load_state(self.state_url, self.header, self.output_now(), self.storage_options)
        if why is not None:
            refused(f"{self.output}: {why}")
        self.stats["state"] = "used" if self.saved is not None else f"full rebuild: {why}" if why else "none"
        if self.saved is not None and self.icechunk is None:
            check_vanished(self.saved, sources, lambda s: exists(s, self.storage_options))
        if self.saved is not None and self.saved.holds_times():
            warm_up()  # an append waits on the store first (freshness): xarray's import overlaps that

    def see_indexes(self, rows: list[FileResult | None]) -> None:
        """Before the rows arrive: the identity now of each up-to-date file's index the saved state holds (from
        a listing of their folder where it holds many, else a stat / HEAD each), to tell an index written
        again since (even outside any batch) from the one the state read."""
        if self.saved is None:
            return
        from ._manifest import current_infos

        held = [r.index for r in rows
                if r is not None and r.status == "up_to_date" and r.source in self.saved.by_source]
        if held:
            self.indexes_now.update((i, info) for i, info in current_infos(held, {}, self.storage_options).items()
                                    if isinstance(info, dict))

    def output_now(self) -> dict[str, Any] | None:
        """What the output is now: the branch's snapshot (Icechunk), else the JSON / .zmetadata's identity."""
        if self.icechunk is not None:
            from ._combine_icechunk import branch_tip

            tip = branch_tip(self.icechunk)
            return None if tip is None else {"snapshot": tip}
        from ._combine_state import output_identity

        return output_identity(self.output, self.storage_options)

    def check_inputs(self, previous: dict[str, Any], sources: list[str]) -> None:
        """Appending to an Icechunk dataset: an input of the previous run that no longer exists fails the
        run, naming it (the dataset would lose its steps without a word)."""
        if self.icechunk is None:
            return
        from ._combine_icechunk import vanished

        was = {s for s, row in previous.items() if row.get("status") != "failed"}  # only what the dataset held
        vanished(sorted(s for s in was - set(sources) if not exists(s, self.storage_options)))


def combine_indexes(report: BatchReport, output: str | os.PathLike, *, concat_dims: Sequence[str] = ("time",),
                    identical_dims: Sequence[str] = (), storage_options: dict[str, Any] | None = None,
                    timeout: float | None = None, mode: str = "by_coords", record_size: int | None = None) -> str:
    """Combine a finished batch's JSON indexes into one at ``output`` (see the module docstring).

    ``identical_dims`` is accepted for compatibility: every coordinate without the concat
    dimension is compared across files anyway.  ``timeout`` is unused (no worker runs it).
    """
    del identical_dims, timeout
    c = Combiner(output, concat_dims=concat_dims, mode=mode, storage_options=storage_options,
                 record_size=record_size)
    try:
        for i, r in enumerate(report.results):
            c.add(r, i)
        return c.finish()
    finally:
        c.close()
