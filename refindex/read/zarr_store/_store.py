"""A read-only zarr store over a reference index, shaped for how readers use one.

``zarr.storage.FsspecStore`` over fsspec's ReferenceFileSystem works (it is what any
zarr user does, and what the tests check), but every key goes through the reference
filesystem's machinery and every referenced chunk is its own request.  This store
serves metadata and inline values straight from the index in memory, and collects
the byte ranges zarr asks for in one turn of the event loop: ranges of the same file
that lie close together are read as one request, a large span in parts side by side on
several connections (an object store serves each connection at a bounded rate), the rest
concurrently.  It counts what it fetched, so tests and benchmarks can see which keys
touched the network.

zarr asks a store for a selection's chunks key by key, at most ``async.concurrency`` at
a time (zarr's default, 10, makes a window of 800 chunks 80 round trips): a store made
here raises that setting to :data:`READ_CONCURRENCY` (never lowers it), so the keys of a
selection arrive together and are fetched in one round trip, and zarr's codec batch size to
:data:`READ_BATCH`, so that zarr's own work per chunk does not outweigh the fetch.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype

from ...errors import SourceError
from ...source import is_transient, merge_ranges, ranged, retry_policy, source_error, split_ranges, whole_file
from ._scan_ahead import ScanAhead
from ..index._urlcheck import expand_url

MERGE_GAP = 256 << 10  # at 50 MB/s, 256 KiB transfer in less time than a 30 ms request waits
MERGE_SPAN = 32 << 20
READ_CONCURRENCY = 4096  # zarr's async.concurrency while refindex reads: a selection's keys arrive together
READ_BATCH = 128  # zarr's codec_pipeline.batch_size: chunks fetched and decoded as one task, not one task each
GATHER_TURNS = 8  # loop turns a batch may wait for keys still arriving (zarr hands them out a turn or two apart)
CONNECTIONS = 256  # HTTP connections (and S3 pool connections) a reader keeps to one host, unless told otherwise


def raise_zarr_settings(at_least: int = READ_CONCURRENCY, batch: int = READ_BATCH) -> None:
    """Let zarr ask for up to ``at_least`` keys at once (its ``async.concurrency``) and handle ``batch``
    chunks per task (its ``codec_pipeline.batch_size``: with 1, each of a window's 800 chunks was a task,
    a gather and a wake-up of its own, 0.19-0.21 s of a 0.06 s fetch; with 128, 0.13-0.15 s in the same
    run, P10).  A higher setting is kept; arrays opened after this take the batch size."""
    import zarr

    if int(zarr.config.get("async.concurrency") or 0) < at_least:
        zarr.config.set({"async.concurrency": at_least})
    if int(zarr.config.get("codec_pipeline.batch_size") or 0) < batch:
        zarr.config.set({"codec_pipeline.batch_size": batch})


@dataclass
class FetchStats:
    """What a store fetched by reference: requests, round trips, bytes, and the keys."""

    requests: int = 0
    round_trips: int = 0
    bytes_fetched: int = 0
    keys: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "round_trips": self.round_trips, "bytes_fetched": self.bytes_fetched,
                "keys_fetched": len(self.keys)}

    def _repr_html_(self) -> str:
        from ...feedback.display import fields

        return fields([("requests", self.requests), ("round trips", self.round_trips),
                       ("bytes fetched", self.bytes_fetched), ("keys fetched", len(self.keys))],
                      title="read by reference")


# (url, [(start, end)]) -> bytes of each range; runs on the store's event loop
RangeReader = Callable[[str, list[tuple[int, int]]], Any]


class IndexStore(Store):
    """zarr store over ``refs`` (key -> inline text/bytes or ``[url, offset, size]``).

    ``templates`` expand ``{{name}}`` in URLs; ``read_ranges(url, spans)`` is an async
    callable returning the bytes of each span (see :func:`fsspec_range_reader`).
    ``label`` is what ``str(store)`` says: hdmf-zarr keys what it has read by it.
    """

    supports_writes = False
    supports_deletes = False
    supports_partial_writes = False
    supports_listing = True

    def __init__(self, refs: Mapping[str, Any], templates: Mapping[str, str] | None,
                 read_ranges: RangeReader, *, label: str = "refindex://index"):
        super().__init__(read_only=True)
        self._refs = refs
        self._templates = dict(templates or {})
        self._read_ranges = read_ranges
        self._label = label
        self._decoded: dict[str, bytes] = {}
        self._sorted_keys: list[str] | None = None
        self._pending: dict[str, list[tuple[int, int, str, asyncio.Future]]] = {}
        self._flush_scheduled = False
        self._queued = 0  # ranges queued for the next flush (a turn that adds none ends the wait)
        self._turns = 0
        self._ahead: dict[str, asyncio.Future] = {}
        self._asked: set[str] = set()  # read-ahead keys a get() waits for
        self._scan = ScanAhead(self.inline)
        self._turn_keys: list[str] = []  # referenced keys asked for since the last flush
        self._guessed: set[str] = set()  # keys fetched ahead along a scan, not asked for yet
        self.stats = FetchStats()
        raise_zarr_settings()

    def __str__(self) -> str:
        return self._label

    def __repr__(self) -> str:
        return f"IndexStore({self._label!r})"

    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return id(self)

    # ------------------------------------------------------------------ lookups
    def inline(self, key: str) -> bytes | None:
        """The inline bytes of ``key``; None when it is referenced or absent."""
        if key in self._decoded:
            return self._decoded[key]
        value = self._refs.get(key)
        if isinstance(value, bytes):
            return value
        if not isinstance(value, str):
            return None
        data = base64.standard_b64decode(value[7:]) if value.startswith("base64:") else value.encode("utf-8")
        self._decoded[key] = data
        return data

    def reference(self, key: str) -> tuple[str, int, int | None] | None:
        """(url, offset, size) of a referenced key (size None: the whole file); None otherwise."""
        value = self._refs.get(key)
        if not isinstance(value, (list, tuple)) or not value:
            return None
        url = self.expand(str(value[0]))
        if len(value) >= 3:
            return url, int(value[1]), int(value[2])
        return url, 0, None

    def expand(self, url: str) -> str:
        return expand_url(url, self._templates)

    # ------------------------------------------------------------------ Store API
    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
                  ) -> Buffer | None:
        data = self.inline(key)
        if data is None and key in self._refs:
            self._turn_keys.append(key)
            self._schedule_flush()
        if data is None and key in self._ahead:
            self._asked.add(key)  # bytes not in yet: hand them out as they come, not recoded
            data = await _taken(self._ahead.pop(key))
        if data is None:
            ref = self.reference(key)
            if ref is None:
                return None
            data = await self._fetch(key, *ref)
        return prototype.buffer.from_bytes(_cut(data, byte_range))

    async def get_partial_values(self, prototype: BufferPrototype,
                                 key_ranges: Iterable[tuple[str, ByteRequest | None]]) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        return key in self._refs

    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()

    async def delete(self, key: str) -> None:
        self._check_writable()

    def _keys(self) -> list[str]:
        if self._sorted_keys is None:
            self._sorted_keys = sorted(self._refs)
        return self._sorted_keys

    async def list(self) -> AsyncIterator[str]:
        for key in self._keys():
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        keys = self._keys()
        for key in keys[bisect.bisect_left(keys, prefix):]:
            if not key.startswith(prefix):
                break
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        prefix = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
        seen: set[str] = set()
        async for key in self.list_prefix(prefix):
            child = key[len(prefix):].split("/", 1)[0]
            if child not in seen:
                seen.add(child)
                yield child

    # ------------------------------------------------------------------ read-ahead
    def read_ahead(self, keys: Iterable[str], recode: Callable[[str, bytes], bytes] | None = None) -> int:
        """Start fetching the referenced ``keys`` now, in the background, for a later :meth:`get`.

        For what a reader will almost surely ask for next (the first chunk a notebook
        plots): its round trip then overlaps with work the caller does meanwhile.  Each
        key's bytes are handed out once and then dropped.  ``recode(key, data)``, run once a
        key's bytes arrive (unless a reader already waits for them), may hand out an
        equivalent encoding that decodes faster (see ``refindex.read.nwb``).  Returns the
        bytes requested.
        """
        wanted = [(k, ref) for k in keys if k not in self._ahead and (ref := self.reference(k)) and ref[2]]
        if not wanted:
            return 0
        from zarr.core.sync import sync

        async def start() -> None:
            for key, (url, offset, size) in wanted:
                fut = asyncio.ensure_future(self._fetch_one(key, url, offset, size, recode))
                fut.add_done_callback(_retrieved)  # a key never asked for fails silently (its get() reports)
                self._ahead[key] = fut

        sync(start())  # registered before this returns: a get() right after finds them
        return sum(size for _, (_, _, size) in wanted)

    def drop_read_ahead(self) -> None:
        """Cancel what is being read ahead (the reader will not come: its open failed)."""
        if not self._ahead:
            return
        from zarr.core.sync import sync

        ahead, self._ahead = list(self._ahead.values()), {}

        async def cancel() -> None:
            for fut in ahead:
                fut.cancel()

        sync(cancel())

    async def _fetch_one(self, key: str, url: str, offset: int, size: int,
                         recode: Callable[[str, bytes], bytes] | None = None) -> bytes:
        """One range as one request (not merged or split: it runs beside other work)."""
        (data,) = await _with_retries(self._read_ranges, url, [(offset, offset + size)])
        data = ranged(data, offset, offset + size, url)
        self.stats.requests += 1
        self.stats.round_trips += 1
        self.stats.bytes_fetched += size
        self.stats.keys.append(key)
        if recode is None or key in self._asked:  # a reader waits: recoding would cost it more than it saves
            return data
        # Here, not in a worker thread: a recode takes a few ms (zlib lets go of the GIL),
        # while the hop to a thread and back takes tens of ms beside a busy main thread.
        return recode(key, bytes(data))

    # ------------------------------------------------------------------ batched fetches
    async def _fetch(self, key: str, url: str, offset: int, size: int | None) -> bytes:
        """Queue one range; all ranges queued in this turn of the loop are fetched together."""
        if size is None:
            raise SourceError(f"reference {key!r} names a whole file without offset and size", file=url)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        self._pending.setdefault(url, []).append((offset, offset + size, key, fut))
        self._schedule_flush()
        return await fut

    def _schedule_flush(self) -> None:
        self._queued += 1
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._turns = 0
            asyncio.get_running_loop().call_soon(self._flush, self._queued)

    def _flush(self, seen: int) -> None:
        """Fetch what is queued once a turn of the loop queued nothing more (zarr's gets of one
        selection start a turn or two apart), waiting at most :data:`GATHER_TURNS` turns."""
        self._turns += 1
        if self._queued != seen and self._turns < GATHER_TURNS:
            asyncio.get_running_loop().call_soon(self._flush, self._queued)
            return
        self._flush_scheduled = False
        self._queued = 0
        pending, self._pending = self._pending, {}
        asked, self._turn_keys = self._turn_keys, []
        if pending:
            self.stats.round_trips += 1
        for url, items in pending.items():
            asyncio.ensure_future(self._fetch_merged(url, items))
        self._scan_ahead(asked)

    def _scan_ahead(self, asked: list[str]) -> None:
        """Fetch, beside this selection's chunks, those the next step of a scan will ask for
        (:mod:`refindex.read.zarr_store._scan_ahead`); guesses of the step before that were not taken are dropped."""
        for key in self._guessed.difference(asked):
            self._ahead.pop(key, None)
        loop = asyncio.get_running_loop()
        guesses: dict[str, list[tuple[int, int, str, asyncio.Future]]] = {}
        for key in self._scan.after(asked):
            ref = self.reference(key)
            if key in self._ahead or ref is None or not ref[2]:
                continue
            fut = loop.create_future()
            fut.add_done_callback(_retrieved)
            self._ahead[key] = fut
            guesses.setdefault(ref[0], []).append((ref[1], ref[1] + ref[2], key, fut))
        self._guessed = {key for items in guesses.values() for *_, key, _ in items}
        for url, items in guesses.items():
            asyncio.ensure_future(self._fetch_merged(url, items))

    async def _fetch_merged(self, url: str, items: list[tuple[int, int, str, asyncio.Future]]) -> None:
        spans, where = merge_ranges([a for a, _, _, _ in items], [b - a for a, b, _, _ in items],
                                    max_gap=MERGE_GAP, max_span=MERGE_SPAN)
        parts, owner = split_ranges(spans)  # (object stores serve a connection at a bounded rate)
        try:
            pieces = [ranged(d, a, b, url) for (a, b), d in zip(parts, await _with_retries(self._read_ranges, url, parts))]
            datas = [b"".join(pieces[i] for i in owned) for owned in owner]
        except BaseException as e:  # every waiting chunk gets the failure
            err = e if isinstance(e, SourceError) else source_error(e, url, "could not read chunk bytes")
            for *_, fut in items:
                if not fut.done():
                    fut.set_exception(err)
            return
        self.stats.requests += len(parts)
        self.stats.bytes_fetched += sum(b - a for a, b in spans)
        for (a, b, key, fut), (span, at) in zip(items, where):
            self.stats.keys.append(key)
            if not fut.done():
                fut.set_result(datas[span][at: at + (b - a)])


def _retrieved(fut: asyncio.Future) -> None:
    """Take a background fetch's failure, so asyncio does not log it as never retrieved."""
    if not fut.cancelled():
        fut.exception()


async def _taken(fut: asyncio.Future) -> bytes | None:
    """A read-ahead's bytes; None when it failed (the caller fetches the key again, reporting errors)."""
    try:
        return await fut
    except Exception:
        return None


def _cut(data: bytes, byte_range: ByteRequest | None) -> bytes:
    if byte_range is None:
        return data
    if isinstance(byte_range, RangeByteRequest):
        return data[byte_range.start: byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return data[byte_range.offset:]
    if isinstance(byte_range, SuffixByteRequest):
        return data[max(0, len(data) - byte_range.suffix):]
    raise ValueError(f"unexpected byte range {byte_range!r}")


async def _with_retries(call: RangeReader, url: str, spans: list[tuple[int, int]]) -> list[bytes]:
    for delay in retry_policy.delays():
        try:
            return await call(url, spans)
        except Exception as e:
            if not is_transient(e):
                raise
            await asyncio.sleep(delay)
    return await call(url, spans)


def fsspec_range_reader(remote_options: Mapping[str, Any] | None = None,
                        protocol_options: Mapping[str, Mapping[str, Any]] | None = None) -> RangeReader:
    """An async range reader over fsspec: local files in a thread, the rest through async filesystems.

    ``remote_options`` apply to every remote protocol; ``protocol_options`` to one each.
    Filesystems are created on first use, on the event loop that reads (zarr's own).
    """
    import fsspec

    filesystems: dict[str, Any] = {}
    wholes: dict[str, bytes] = {}  # small files from servers that ignore Range requests: sent whole once

    def local_read(path: str, spans: list[tuple[int, int]]) -> list[bytes]:
        out = []
        try:
            with open(path, "rb") as fh:
                for a, b in spans:
                    fh.seek(a)
                    out.append(fh.read(b - a))
        except FileNotFoundError as e:
            raise SourceError("file not found", file=path) from e
        return out

    async def read(url: str, spans: list[tuple[int, int]]) -> list[bytes]:
        protocol, path = fsspec.core.split_protocol(url)
        if protocol in (None, "file", "local"):
            return await asyncio.to_thread(local_read, path, spans)
        if url in wholes:
            return [wholes[url][a:b] for a, b in spans]
        fs = filesystems.get(protocol)
        if fs is None:
            opts = with_connections(protocol, {**(remote_options or {}), **((protocol_options or {}).get(protocol) or {})})
            fs = fsspec.filesystem(protocol, asynchronous=True, **opts)
            filesystems[protocol] = fs
        target = url if protocol in ("http", "https") else fs._strip_protocol(url)
        if len(spans) == 1:  # (one range: fsspec's own call for it, without _cat_ranges' batching around it)
            try:
                datas = [await fs._cat_file(target, start=spans[0][0], end=spans[0][1])]
            except Exception as e:  # noqa: BLE001 - raised below, as _cat_ranges returns failures
                datas = [e]
        else:
            datas = await fs._cat_ranges([target] * len(spans), [a for a, _ in spans], [b for _, b in spans])
        out = []
        for (a, b), d in zip(spans, datas):
            if isinstance(d, BaseException):
                raise d
            if whole_file(d, a, b):
                wholes[url] = d
            out.append(ranged(d, a, b, url))
        return out

    return read


async def _many_connections(**kwargs: Any) -> Any:
    """fsspec's HTTP client with :data:`CONNECTIONS` connections (aiohttp's default is 100)."""
    import aiohttp

    kwargs.setdefault("connector", aiohttp.TCPConnector(limit=CONNECTIONS))
    return aiohttp.ClientSession(**kwargs)


def with_connections(protocol: str | None, opts: dict[str, Any]) -> dict[str, Any]:
    """``opts`` for an async filesystem of ``protocol`` that keeps many requests in flight, unless they say otherwise:
    a selection's chunks in many files (an archive combined into one index) are one request each."""
    if protocol in ("http", "https") and "get_client" not in opts and "connector" not in opts.get("client_kwargs", {}):
        return {**opts, "get_client": _many_connections}
    if protocol in ("s3", "s3a"):
        config = dict(opts.get("config_kwargs") or {})
        config.setdefault("max_pool_connections", CONNECTIONS)
        return {**opts, "config_kwargs": config}
    return opts
