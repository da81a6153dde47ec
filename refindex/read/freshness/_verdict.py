"""What the validators alone say about an index's source: the same, changed, or ask its bytes.

Pure comparison, no I/O.  Validators are cheap but partial: a server may send none; a
time in whole seconds cannot tell apart two writes within the second it names; and a
re-upload of the same bytes gets a new ETag (a server's ETag is often its mtime and size),
version id and time.  In each of those cases the content fingerprint decides ("ask").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from ...source import fine_grained, same_mtime

STRONG = ("etag", "version")  # each names one state of the file's bytes: equal means unchanged


@dataclass(frozen=True)
class Verdict:
    """``same`` (``how``: the validator that proved it), ``changed`` or ``ask`` (the fingerprint decides).

    ``why``: what differed or was missing, for the error message.  ``changed_validators``:
    a validator differs (without a fingerprint that means the source changed).
    """

    outcome: Literal["same", "changed", "ask"]
    how: str = ""
    why: str = ""
    changed_validators: bool = False


def verdict(recorded: Mapping[str, Any], now: Mapping[str, Any], same_place: bool = True) -> Verdict:
    """Compare the provenance an index recorded with the source as it is ``now``.

    ``same_place``: ``now`` describes the file the index was made from (not another copy,
    whose validators are its own: only its size and bytes can agree).
    """
    if "size" in recorded and "size" in now and recorded["size"] != now["size"]:
        return Verdict("changed", why=f"size {recorded['size']!r} -> {now['size']!r}")
    if not same_place:
        return Verdict("ask", why="another copy of the source (its validators are its own)")
    differing = []
    for key in STRONG:
        if recorded.get(key) and now.get(key):
            if recorded[key] == now[key]:
                return Verdict("same", how=key)
            differing.append(f"{key} {recorded[key]!r} -> {now[key]!r}")
    if differing:
        return Verdict("ask", why="; ".join(differing), changed_validators=True)
    if recorded.get("mtime") is not None and now.get("mtime") is not None:
        same = same_mtime(recorded["mtime"], now["mtime"])
        if same is False or (same is None and recorded["mtime"] != now["mtime"]):
            return Verdict("ask", why=f"mtime {recorded['mtime']!r} -> {now['mtime']!r}", changed_validators=True)
        if fine_grained(recorded["mtime"]):
            return Verdict("same", how="mtime")
        return Verdict("ask", why="its modification time is in whole seconds (a rewrite within that second keeps it)")
    return Verdict("ask", why="the server sends no ETag or Last-Modified")


def needs_bytes_first(recorded: Mapping[str, Any]) -> bool:
    """Will the fingerprint surely be asked, even when the source is unchanged?  (Then its bytes are
    fetched together with the ``info`` call: one round trip instead of two.)"""
    if any(recorded.get(k) for k in STRONG):
        return False
    mtime = recorded.get("mtime")
    return mtime is None or not fine_grained(mtime)
