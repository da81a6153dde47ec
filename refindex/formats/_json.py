"""RFS v1 as JSON text: the whole dict, or streamed straight from the chunk tables.

Streaming formats chunk entries ``block`` at a time from the numpy columns (a fixed-width
byte matrix, four digits per table lookup), so memory stays at a block of text, not a
dict entry per chunk; the text is the same as the dict's.
"""

from __future__ import annotations

import base64
import os
import re
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import numpy as np
import ujson

from ..errors import RefindexError
from ..model import V2_KEYS, ArrayNode, KeyEncoding, RefsDocument, Tree, inline_rows
from ._atomic import atomic_file, atomic_write_bytes
from ._refs import chunk_refs, head_refs, prefix_of

# Chunks formatted per block: memory stays at one block of strings, not a dict entry per chunk.
STREAM_BLOCK = 20_000  # chunk entries per formatted block: ~1 MB of text, a few blocks in flight


def dumps(refs: Any) -> str:
    return ujson.dumps(refs, escape_forward_slashes=False, ensure_ascii=False)


def write_json(refs: RefsDocument, path: str | os.PathLike) -> None:
    """Write an RFS dict to ``path`` atomically."""
    try:
        data = dumps(refs).encode("utf-8")
    except (UnicodeEncodeError, OverflowError, ValueError) as e:  # e.g. names that are not valid UTF-8
        raise RefindexError(f"cannot write the index as JSON: {e}", file=os.fspath(path)) from e
    atomic_write_bytes(path, data)


def _multi_file_text(tree: Tree, path: str, templates: dict[str, str],
                     encoding: KeyEncoding) -> Iterator[tuple[str, int, int]]:
    """Streamed-JSON text of an array whose chunks lie in several files (a virtual dataset).

    Built like :func:`to_refs` (a dict per array, inline first, references win), which
    costs a dict entry per chunk of this array only.
    """
    one = Tree(url=tree.url, arrays={path: tree.arrays[path]})
    entries: dict[str, Any] = {}
    nref = ninl = 0
    for keys, values in chunk_refs(one, templates, encoding):
        entries.update(zip(keys, values))
    for v in entries.values():
        if isinstance(v, list):
            nref += 1
        else:
            ninl += 1
    yield "".join(f",{dumps(k)}:{dumps(v)}" for k, v in entries.items()), nref, ninl


def _decimal_width(v: np.ndarray) -> np.ndarray:
    """Number of decimal digits of each non-negative integer (1 for 0)."""
    width = np.ones(v.shape, np.int64)
    bound = 10
    while bound <= int(v.max(initial=0)):
        width += v >= bound
        bound *= 10
    return width


def _unsigned(values: Any) -> np.ndarray:
    """``values`` as uint64 (offsets may use the full unsigned range); negative values are an error."""
    v = np.asarray(values)
    if v.dtype.kind == "i" and len(v) and int(v.min()) < 0:
        raise ValueError("format_rows: negative value")
    return v.astype(np.uint64, copy=False)


_DIGITS4 = np.frombuffer(b"".join(b"%04d" % i for i in range(10_000)), np.uint8).reshape(10_000, 4)


def format_rows(parts: list[bytes | np.ndarray]) -> bytes:
    """Rows of text built from constant byte strings and non-negative integer columns, concatenated.

    ``format_rows([b',"x/', a, b'.', b, b'"]'])`` equals ``b"".join(b',"x/%d.%d"]' % r for r in zip(a, b))``
    but is computed column-wise, for the chunk entries of big indexes: each row is laid
    out in a fixed-width byte matrix (numbers right-aligned, written four digits at a time
    from a table), then the leading padding is dropped with one boolean mask.
    """
    cols = [_unsigned(p) for p in parts if not isinstance(p, bytes)]
    n = len(cols[0]) if cols else 1
    layout: list[tuple[Any, int, np.ndarray | None]] = []  # (bytes or values, matrix width, digit counts)
    total = 0
    it = iter(cols)
    for p in parts:
        if isinstance(p, bytes):
            layout.append((p, len(p), None))
            total += len(p)
        else:
            v = next(it)
            w = _decimal_width(v)
            width = 4 * -(-int(w.max(initial=1)) // 4)
            layout.append((v, width, w))
            total += width
    text = np.empty((n, total), np.uint8)
    keep = None
    at = 0
    for p, width, w in layout:
        if w is None:
            text[:, at:at + width] = np.frombuffer(p, np.uint8)
        else:
            v = p
            for k in range(at + width - 4, at - 1, -4):  # four digits at a time, right to left
                q = v // 10_000
                text[:, k:k + 4] = _DIGITS4.take((v - q * 10_000).astype(np.intp), axis=0)
                v = q
            pad = width - w
            if pad.any():
                if keep is None:
                    keep = np.ones((n, total), bool)
                patterns = np.arange(width) >= np.arange(width + 1)[:, None]  # row p: drop p leading bytes
                keep[:, at:at + width] = patterns.take(pad, axis=0)
        at += width
    return text.tobytes() if keep is None else text[keep].tobytes()

def _array_text(prefix: str, node: ArrayNode, url: str, block: int,
                encoding: KeyEncoding = V2_KEYS) -> Iterator[tuple[str | bytes, int, int]]:
    """(text, chunks referenced, inline chunks) blocks of ``,"key":value`` entries of one array.

    Same keys, values and order as :func:`chunk_refs` + ``dict.update`` in :func:`to_refs`:
    inline chunks first, then referenced ones; a key in both keeps the inline position
    and takes the referenced value.  Chunk keys in ``encoding``.
    """
    pj = dumps(prefix)[:-1]  # '"' + escaped prefix, without the closing quote: escaped once per array
    uj = dumps(url)
    t = node.refs
    coords, offsets, sizes = (t.coords, t.offsets, t.sizes) if t is not None and len(t) else (None, None, None)
    ndim = len(node.shape)
    if node.inline:
        model_keys = list(node.inline)
        keys = [encoding.of_model_key(k, ndim) for k in model_keys]
        override: dict[str, tuple[int, int]] = {}
        if coords is not None:
            hit = inline_rows(coords, model_keys)  # column-wise: no key text per referenced chunk
            if hit.any():  # rare: a chunk both inlined and referenced; the reference wins (as in to_refs)
                for k, o, s in zip(encoding.keys(coords[hit]), offsets[hit].tolist(), sizes[hit].tolist()):
                    override[k] = (o, s)
                keep = ~hit
                coords, offsets, sizes = coords[keep], offsets[keep], sizes[keep]
        plain = not re.search(r"[^0-9./c]", "".join(keys))  # digits, dots, "c/": nothing to escape
        for lo in range(0, len(keys), block):
            parts = []
            for k, mk in zip(keys[lo:lo + block], model_keys[lo:lo + block]):
                kj = pj + k + '"' if plain else dumps(prefix + k)
                if k in override:
                    o, s = override[k]
                    parts.append(f",{kj}:[{uj},{o},{s}]")
                else:
                    b64 = base64.standard_b64encode(node.inline[mk]).decode("ascii")
                    parts.append(f',{kj}:"base64:{b64}"')
            hits = sum(1 for k in keys[lo:lo + block] if k in override) if override else 0
            yield "".join(parts), hits, len(parts) - hits
    if coords is None or not len(coords):
        return
    n, ndim = coords.shape
    head = ("," + pj + (encoding.lead if ndim else "")).encode("utf-8")
    tail = ('":[' + uj + ",").encode("utf-8")
    sep, scalar = encoding.sep.encode("utf-8"), encoding.scalar.encode("utf-8")

    def rows(lo: int) -> bytes:
        hi = min(n, lo + block)
        parts: list[bytes | np.ndarray] = [head]
        for i in range(ndim):
            parts += [coords[lo:hi, i], sep]
        if ndim:
            parts.pop()
        else:
            parts.append(scalar)
        parts += [tail, offsets[lo:hi], b",", sizes[lo:hi], b"]"]
        return format_rows(parts)

    starts = range(0, n, block)
    if len(starts) < 3:
        for lo in starts:
            yield rows(lo), min(n, lo + block) - lo, 0
        return
    # numpy releases the GIL in format_rows' array work: two threads format blocks side by
    # side (in order, at most a few blocks ahead of the writer).
    with ThreadPoolExecutor(max_workers=2) as pool:
        pending: deque = deque()
        for lo in starts:
            pending.append((pool.submit(rows, lo), min(n, lo + block) - lo))
            if len(pending) > 2:
                fut, count = pending.popleft()
                yield fut.result(), count, 0
        while pending:
            fut, count = pending.popleft()
            yield fut.result(), count, 0


def write_json_stream(tree: Tree, path: str | os.PathLike, *, block: int = STREAM_BLOCK,
                      head: dict[str, Any] | None = None, encoding: KeyEncoding = V2_KEYS) -> dict[str, Any]:
    """Write the RFS JSON of ``tree`` to ``path`` straight from the chunk tables, atomically.

    The text is the same as ``write_json(to_refs(tree), path)`` (same keys, values and
    order) without ever holding a dict entry per chunk: chunk entries are formatted
    ``block`` at a time from the numpy tables.  ``head``: :func:`head_refs` if already
    built (a zarr v3 index passes its own, and its chunk key ``encoding``).  Returns a
    summary: keys, chunks referenced, inline chunks, bytes, skipped.
    """
    head = head_refs(tree) if head is None else head
    templates = head["templates"]
    by_url = {v: "{{" + k + "}}" for k, v in templates.items()}
    summary = {"format": "json", "keys": len(head["refs"]), "chunks_referenced": 0, "inline_chunks": 0,
               "bytes": 0, "skipped": list(tree.skipped)}
    try:
        start = (f'{{"version":{dumps(head["version"])},"templates":{dumps(templates)},"refs":{{'
                 + ",".join(f"{dumps(k)}:{dumps(v)}" for k, v in head["refs"].items()))
        tail = f'}},"refindex":{dumps(head["refindex"])}}}'
        sep_needed = bool(head["refs"])
        with atomic_file(path) as fh:
            fh.write(start.encode("utf-8"))
            for apath in sorted(tree.arrays):
                a = tree.arrays[apath]
                if a.refs is not None and a.refs.url_index is not None:  # chunks in several files (VDS)
                    parts = _multi_file_text(tree, apath, templates, encoding)
                else:
                    url = by_url[(a.refs.url if a.refs is not None else None) or tree.url]
                    parts = _array_text(prefix_of(apath), a, url, block, encoding)
                for text, nref, ninl in parts:
                    data = text if isinstance(text, bytes) else text.encode("utf-8")
                    if data and not sep_needed:
                        data, sep_needed = data[1:], True  # the entry's leading comma
                    fh.write(data)
                    summary["chunks_referenced"] += nref
                    summary["inline_chunks"] += ninl
            fh.write(tail.encode("utf-8"))
            summary["bytes"] = fh.tell()
    except (UnicodeEncodeError, OverflowError, ValueError) as e:  # e.g. names that are not valid UTF-8
        raise RefindexError(f"cannot write the index as JSON: {e}", file=os.fspath(path)) from e
    summary["keys"] += summary["chunks_referenced"] + summary["inline_chunks"]
    return summary
