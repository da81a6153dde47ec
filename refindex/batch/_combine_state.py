"""The combine's saved state: what an append needs of the files already combined, kept with the output.

A re-run with more inputs must not read every old file's index again (issue 43: adding 10 % of
the files should cost about 10 % of the run).  So each run keeps, with its output, every file's
digest as the combine reduced it (:class:`~._combine_digest.FileDigest`: metadata, chunk columns,
inline bytes, the concat coordinate's stored values and decoded steps), the file's identity as its
row recorded it (size, ETag, mtime, version), its index's location, and the index file's own size
and ETag/mtime when it was read (an index written again outside any batch leaves the manifest's row
as it was).  The next run takes the digest of an input whose row is up to date and whose identity
and index are the saved ones from the state, and reads the index of every other input (new,
changed, re-indexed, its index rewritten) as a full run does;
the combination is then made from the same digests by the same code as a full run's.

The state is used only when it matches the run: the state's format, refindex's version,
``INDEX_FORM``, xarray's version (it decoded the saved steps), the files' index options
(fingerprint), the combine's dimension, mode and output kind, and the output itself as the state
recorded it after writing it (size and ETag/mtime of the JSON file or of the parquet folder's
``.zmetadata``; the branch's snapshot for Icechunk).  Anything else (no state, unreadable, another
version or options, the output replaced or edited since) is a full rebuild, said on stderr: never a
wrong result.  It is written after the output (a temporary file then a rename, or one PUT), so a run
that stops between the two leaves a state whose recorded output no longer matches.

Where: in a parquet folder (``.combine-state.npz``), beside a JSON output as a hidden sibling
(``.<name>.combine-state.npz``), beside an Icechunk repository (``.<repo>.combine-state.npz``).
One ``.npz`` (numpy's zip of arrays, no pickles): a JSON header, one JSON line per file (its
metadata as numbers into a table of distinct documents: files mostly share them), and the files'
chunk columns, inline bytes, values and steps concatenated, each with the end of every file's part.  An
inline chunk's offset is into the whole inline buffer, where a chunk of ``SHARED`` bytes or more is kept once
(files of an archive mostly repeat their small coordinates, e.g. lat and lon: 2 KB a file in P9's).
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from functools import lru_cache
from typing import Any

import numpy as np

from .. import urls
from ._combine_digest import ChunkColumns, FileDigest
from ._combine_plan import Column
from ._combine_times import Encoding
from ._combine_write import is_json

STATE_VERSION = 4  # 2: the concat coordinate's values carry their dtype and shape; 3: inline chunks kept once;
# 4: each file's index as read (its size and ETag/mtime)
SHARED = 64  # inline chunks of this many bytes or more are kept once however many files hold them
COLUMNS = ("line_end", "rows_end", "url", "offset", "size", "coords", "coords_end", "inline", "inline_end",
           "values", "values_end", "steps", "steps_end")


def state_location(output: str, icechunk: bool) -> str:
    """Where the state of a combined ``output`` is kept (see the module docstring)."""
    out = output.rstrip("/")
    if not icechunk and not is_json(out):
        return beside(out, ".combine-state.npz", inside=True)
    name = out.rsplit("/", 1)[-1] if not urls.is_local(out) else os.path.basename(out)
    return beside(out, f".{name}.combine-state.npz", inside=False)


def beside(out: str, name: str, inside: bool) -> str:
    if urls.is_local(out):
        return os.path.join(out if inside else os.path.dirname(out), name)
    return (out if inside else out.rsplit("/", 1)[0]) + "/" + name


def header_of(fingerprint: str, dim: str, mode: str, kind: str) -> dict[str, Any]:
    """What a state must share with a run to be used (the output's identity is compared apart)."""
    from importlib.metadata import version

    from .. import __version__
    from ..options import INDEX_FORM

    try:
        xarray = version("xarray")
    except Exception:  # noqa: BLE001 - not installed: no times were decoded
        xarray = None
    return {"state": STATE_VERSION, "refindex": __version__, "form": INDEX_FORM, "xarray": xarray,
            "fingerprint": fingerprint, "dim": dim, "mode": mode, "kind": kind}


def identity_of(row: Any, index: dict[str, Any] | None) -> dict[str, Any]:
    """The source as its row describes it, and which index of it: when it was made and its size as the row
    says, and the index file itself (``index``: its size and ETag/mtime, :func:`index_identity`)."""
    return {"size": row.size, "etag": row.etag, "mtime": row.mtime, "version": row.version,
            "finished": row.finished, "index_bytes": row.index_bytes, "index": index}


def index_identity(index: str, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """The index file's size and ETag/mtime now (a stat, or one HEAD); None when it cannot be told (then the
    next run reads the index again).  Taken before the index is read: a rewrite after it is seen next time."""
    from ..source import file_info

    try:
        return dict(file_info(*urls.filesystem(index, storage_options)))
    except Exception:  # noqa: BLE001 - unknown: never trusted
        return None


def same_identity(saved: dict[str, Any], now: dict[str, Any]) -> bool:
    """The file the state saw (the manifest's rule: size, then ETag, else mtime; versions when both have one)
    and the same index of it: the row's (an index made again by a batch, e.g. ``--force`` without
    ``--combine``) and the file's own (one written again outside any batch, its manifest row unchanged:
    size, then ETag, else mtime below the second where both show it)."""
    from ._manifest import unchanged

    if saved.get("version") and now.get("version") and saved["version"] != now["version"]:
        return False
    if (saved.get("finished"), saved.get("index_bytes")) != (now.get("finished"), now.get("index_bytes")):
        return False
    if not saved.get("index") or not now.get("index") or not unchanged(saved["index"], now["index"]):
        return False
    return unchanged(saved, now)


class StateBuilder:
    """Every digest of this run, as it joins the combination, in the state's columns."""

    def __init__(self) -> None:
        self.docs: dict[str, int] = {}
        self.sources: list[str] = []
        self.lines = bytearray()
        self.cols = {name: Column(np.int64) for name in COLUMNS if name.endswith("_end")}
        self.cols.update(url=Column(np.int32), offset=Column(np.int64), size=Column(np.int64),
                         coords=Column(np.int64))
        self.inline, self.values, self.steps = bytearray(), bytearray(), bytearray()
        self.shared: dict[bytes, int] = {}  # an inline chunk's bytes -> its offset in self.inline

    def doc(self, value: Any) -> int:
        return self.docs.setdefault(json.dumps(value), len(self.docs))

    def add(self, d: FileDigest, identity: dict[str, Any], index: str, dim: str) -> None:
        arrays = []
        for name, c in d.chunks.items():
            arrays.append([name, self.doc(d.zarrays[name]), self.doc(d.zattrs[name]), len(c.url)])
            for key, values in (("url", c.url), ("offset", self.keep_inline(d.inline, c)), ("size", c.size),
                                ("coords", c.coords.reshape(-1))):
                self.cols[key].append(values)
        enc = None
        if d.decoded is not None:
            steps, e = d.decoded
            values = np.ascontiguousarray(d.values[dim])
            enc = [e.units, e.calendar, e.dtype, e.kind, np.asarray(steps).dtype.str, values.dtype.str, values.shape]
            self.values += values.tobytes()
            self.steps += np.ascontiguousarray(steps).tobytes()
        rec = {"source": d.source, "index": index, "id": identity, "attrs": self.doc(d.attrs), "arrays": arrays,
               "hashes": self.doc(d.hashes), "urls": d.urls, "enc": enc}
        self.sources.append(d.source)
        self.lines += json.dumps(rec).encode("utf-8") + b"\n"
        for key, n in (("line", len(self.lines)), ("rows", self.cols["url"].n),
                       ("coords", self.cols["coords"].n), ("inline", len(self.inline)),
                       ("values", len(self.values)), ("steps", len(self.steps))):
            self.cols[key + "_end"].append(np.array([n]))

    def keep_inline(self, blob: bytes, c: ChunkColumns) -> np.ndarray:
        """``c``'s offsets with its inline chunks' bytes in the state's buffer (a repeated one kept once)."""
        rows = np.flatnonzero(c.url == -1).tolist()
        if not rows:
            return c.offset
        out = c.offset.copy()
        for r in rows:
            data = bytes(blob[int(c.offset[r]):int(c.offset[r] + c.size[r])])
            at = self.shared.get(data) if len(data) >= SHARED else None
            if at is None:
                at = len(self.inline)
                self.inline += data
                if len(data) >= SHARED:
                    self.shared[data] = at
            out[r] = at
        return out

    def save(self, location: str, header: dict[str, Any], storage_options: dict[str, Any] | None) -> None:
        """Write the state (whole or not at all); a failure is said on stderr, never fails the run.  Written
        straight into a file (no copy of the columns and inline bytes in memory: they grow with the files)."""
        from ..formats import atomic_file

        head = {**header, "docs": list(self.docs), "files": len(self.sources)}
        arrays = {k: c.values for k, c in self.cols.items()}
        arrays.update(header=np.frombuffer(json.dumps(head).encode("utf-8"), dtype=np.uint8),
                      **{k: np.frombuffer(getattr(self, k), dtype=np.uint8)
                         for k in ("lines", "inline", "values", "steps")})
        try:
            protocol, path = urls.split(location)
            if protocol == "file":
                with atomic_file(path, "the combine's state") as fh:
                    np.savez(fh, **arrays)
                return
            with tempfile.TemporaryDirectory(prefix="refindex-state-") as tmp:
                local = os.path.join(tmp, "state.npz")
                with open(local, "wb") as fh:
                    np.savez(fh, **arrays)
                fs, p = urls.filesystem(location, storage_options)
                fs.put_file(local, p)  # one PUT: the object appears whole or not at all
        except Exception as e:  # noqa: BLE001 - the output is written; the next run combines in full
            note(f"could not save the combine's state {location} ({type(e).__name__}: {e}); the next run "
                 "reads every file's index to combine")


class SavedState:
    """A state read back: the digest of a saved file, by source, as the run that saved it made it."""

    def __init__(self, header: dict[str, Any], arrays: dict[str, np.ndarray]):
        self.header, self.a = header, arrays
        self.docs: list[str] = header["docs"]
        ends = arrays["line_end"]
        blob = arrays["lines"].tobytes()
        self.lines = blob
        self.starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        self.ends = ends
        self.by_source: dict[str, int] = {}
        for k in range(len(ends)):
            source = json.loads(blob[self.starts[k]:ends[k]])["source"]
            self.by_source[source] = k
        self.parsed = lru_cache(maxsize=4096)(lambda i: json.loads(self.docs[i]))

    def holds_times(self) -> bool:
        """Were the saved files' steps times (decoded with xarray), judging by the first file?"""
        enc = self.record(0)["enc"] if len(self.ends) else None
        return enc is not None and enc[3] != "raw"

    @property
    def sources(self) -> list[str]:
        return list(self.by_source)

    def record(self, k: int) -> dict[str, Any]:
        return json.loads(self.lines[int(self.starts[k]):int(self.ends[k])])

    def span(self, name: str, k: int) -> tuple[int, int]:
        end = self.a[name + "_end"]
        return (int(end[k - 1]) if k else 0), int(end[k])

    def digest_of(self, row: Any, dim: str, index: dict[str, Any] | None) -> FileDigest | None:
        """The saved digest of ``row``'s source when the row is up to date with the same identity and index
        (``index``: the index file's identity now, :func:`index_identity`)."""
        k = self.by_source.get(row.source)
        if k is None or row.status != "up_to_date":
            return None
        rec = self.record(k)
        if rec["index"] != row.index or not same_identity(rec["id"], identity_of(row, index)):
            return None
        return self.digest(rec, k, dim)

    def digest(self, rec: dict[str, Any], k: int, dim: str) -> FileDigest:
        zarrays = {name: self.parsed(za) for name, za, _, _ in rec["arrays"]}
        zattrs = {name: self.parsed(zt) for name, _, zt, _ in rec["arrays"]}
        d = FileDigest(rec["source"], self.parsed(rec["attrs"]), zarrays, zattrs, {}, list(rec["urls"]), b"",
                       hashes=self.parsed(rec["hashes"]))
        r0, _ = self.span("rows", k)
        c0, _ = self.span("coords", k)
        for name, _, _, n in rec["arrays"]:
            ndim = len(zarrays[name]["shape"])
            d.chunks[name] = ChunkColumns(self.a["coords"][c0:c0 + n * ndim].reshape(n, ndim),
                                          self.a["url"][r0:r0 + n], self.a["offset"][r0:r0 + n],
                                          self.a["size"][r0:r0 + n])
            r0, c0 = r0 + n, c0 + n * ndim
        d.inline = gather_inline(self.a["inline"], d)
        if rec["enc"] is not None:
            units, calendar, dtype, kind, steps_dtype, values_dtype, shape = rec["enc"]
            v0, v1 = self.span("values", k)
            values = np.frombuffer(self.a["values"][v0:v1].tobytes(), dtype=np.dtype(values_dtype))
            d.values[dim] = values.reshape(shape)
            s0, s1 = self.span("steps", k)
            steps = np.frombuffer(self.a["steps"][s0:s1].tobytes(), dtype=np.dtype(steps_dtype))
            d.decoded = (steps, Encoding(units, calendar, dtype, kind))
        return d


def gather_inline(blob: np.ndarray, d: FileDigest) -> bytes:
    """The saved file's inline chunks in a buffer of its own (``d``'s offsets made into it)."""
    pieces, at = [], 0
    for c in d.chunks.values():
        rows = np.flatnonzero(c.url == -1).tolist()
        if rows:
            c.offset = c.offset.copy()  # a view of the state's column: not changed
        for r in rows:
            o, n = int(c.offset[r]), int(c.size[r])
            pieces.append(blob[o:o + n].tobytes())
            c.offset[r], at = at, at + n
    return b"".join(pieces)


def load_state(location: str, header: dict[str, Any], output: dict[str, Any] | None,
               storage_options: dict[str, Any] | None) -> tuple[SavedState | None, str | None]:
    """The state at ``location`` when it matches ``header`` and the ``output`` identity now; else None and
    why (None too when there is no state and no output: a first run says nothing)."""
    try:
        fs, path = urls.filesystem(location, storage_options)
        data = fs.cat_file(path)
    except FileNotFoundError:
        return None, None if output is None else "no saved state beside the output"
    except Exception as e:  # noqa: BLE001 - unreadable: a full rebuild
        return None, f"its state {location} cannot be read ({type(e).__name__}: {e})"
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        saved = json.loads(arrays["header"].tobytes())
        missing = [k for k in (*COLUMNS, "lines") if k not in arrays]
        if missing:
            return None, f"its state {location} is incomplete (no {missing[0]})"
    except Exception as e:  # noqa: BLE001 - damaged: a full rebuild
        return None, f"its state {location} is damaged ({type(e).__name__}: {e})"
    for key, want in header.items():
        if saved.get(key) != want:
            return None, f"its state was made with {key} {saved.get(key)!r}, this run's is {want!r}"
    if output is None or saved.get("output") != output:
        return None, "the output is not the one its state was saved with (replaced or edited since)"
    try:
        return SavedState(saved, arrays), None
    except Exception as e:  # noqa: BLE001 - damaged: a full rebuild
        return None, f"its state {location} is damaged ({type(e).__name__}: {e})"


def output_identity(output: str, storage_options: dict[str, Any] | None) -> dict[str, Any] | None:
    """Size and ETag/mtime of the JSON output or the parquet folder's ``.zmetadata``; None when absent."""
    from ..source import file_info
    from ..formats import ZMETADATA

    target = output if is_json(output) else beside(output.rstrip("/"), ZMETADATA, inside=True)
    try:
        fs, path = urls.filesystem(target, storage_options)
        fs.invalidate_cache(path)
        if not fs.exists(path):
            return None
        return dict(file_info(fs, path))
    except Exception:  # noqa: BLE001 - cannot tell: no state is trusted
        return None


def note(text: str) -> None:
    print(f"refindex batch --combine: {text}", file=sys.stderr, flush=True)


def refused(why: str) -> None:
    note(f"{why}: every file's index is read to combine (a full rebuild)")


def check_vanished(saved: SavedState, sources: list[str], exists: Any) -> None:
    """An input the saved combine held that is gone now fails the run, naming it."""
    from ._combine_icechunk import vanished

    now = set(sources)
    vanished(sorted(s for s in saved.sources if s not in now and not exists(s)))

