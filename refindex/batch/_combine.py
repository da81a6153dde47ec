"""One index of many: kerchunk's MultiZarrToZarr over a batch's JSON indexes, under a time limit."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from .. import urls
from ..errors import RefindexError
from ._results import BatchReport


def combine_job(indexes: list[str], output: str, storage_options: dict[str, Any] | None,
                 concat_dims: list[str], identical_dims: list[str]) -> dict[str, Any]:
    """Runs in a worker process: kerchunk's MultiZarrToZarr over the per-file indexes."""
    try:
        from kerchunk.combine import MultiZarrToZarr
    except ImportError as e:
        raise RefindexError(f"--combine needs kerchunk ({e})") from e
    docs = []
    for idx in indexes:
        fs, path = urls.filesystem(idx, storage_options)
        docs.append(json.loads(fs.cat_file(path)))
    remote = None
    first = urls.split(docs[0].get("refindex", {}).get("source", {}).get("url", "") or "")[0] if docs else "file"
    if first != "file":
        remote = first
    try:
        combined = MultiZarrToZarr(docs, concat_dims=list(concat_dims), identical_dims=list(identical_dims),
                                   remote_protocol=remote, remote_options=storage_options if remote else None
                                   ).translate()
    except Exception as e:  # noqa: BLE001 - kerchunk raises anything
        raise RefindexError(f"kerchunk's MultiZarrToZarr could not combine {len(docs)} indexes "
                            f"(concat_dims={list(concat_dims)}): {type(e).__name__}: {e}") from e
    size = _put_json(combined, output, storage_options)
    return {"keys": len(combined.get("refs", {})), "bytes": size}


def _put_json(refs: dict[str, Any], index: str, storage_options: dict[str, Any] | None) -> int:
    from ..writers import dumps, write_json

    protocol, path = urls.split(index)
    if protocol == "file":
        write_json(refs, path)
        return os.path.getsize(path)
    data = dumps(refs).encode("utf-8")
    fs, p = urls.filesystem(index, storage_options)
    fs.pipe_file(p, data)  # one PUT: the object appears whole or not at all
    return len(data)


def combine_indexes(report: BatchReport, output: str | os.PathLike, *, concat_dims: Sequence[str] = ("time",),
                    identical_dims: Sequence[str] = (), storage_options: dict[str, Any] | None = None,
                    timeout: float | None = None) -> str:
    """Merge the batch's JSON indexes into one at ``output`` (kerchunk, under a time limit)."""
    from ..isolate import DEFAULT_TIMEOUT, Worker

    if report.failed:
        names = ", ".join(r.source for r in report.failed[:5])
        raise RefindexError(f"cannot combine: {len(report.failed)} input(s) failed ({names})")
    indexes = [r.index for r in report.results]
    target = urls.normalise(os.fspath(output))
    with Worker() as w:
        w.run(combine_job,
              dict(indexes=indexes, output=target, storage_options=storage_options, concat_dims=list(concat_dims),
                   identical_dims=list(identical_dims)),
              timeout=timeout or DEFAULT_TIMEOUT, label=f"combine -> {target}")
    return target
