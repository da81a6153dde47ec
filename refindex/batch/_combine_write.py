"""The combined dataset written out: a JSON index (small archives) or parquet references.

The output's name chooses: ``*.json`` is one JSON reference document; anything else (a
folder, ``*.parq``) is fsspec's parquet layout (``LazyReferenceMapper``: ``.zmetadata`` plus
``<array>/refs.<n>.parq`` of ``record_size`` rows in C order of the chunk grid), built one
record at a time from the chunk columns.  Both carry consolidated metadata, so zarr and xarray
open them with their defaults.  Local outputs appear whole (temporary name, then rename);
remote ones are one PUT (JSON) or records first and ``.zmetadata`` last (parquet).
"""

from __future__ import annotations

import base64
import math
import os
from typing import Any, Iterator

import numpy as np

from .. import urls
from ..errors import RefindexError
from ._combine_layout import OutArray, OutLayout


def is_json(output: str) -> bool:
    return output.rstrip("/").lower().endswith(".json")


def metadata(out: OutLayout) -> dict[str, dict[str, Any]]:
    meta: dict[str, dict[str, Any]] = {".zgroup": {"zarr_format": 2}}
    if out.attrs:
        meta[".zattrs"] = out.attrs
    for name, a in sorted(out.arrays.items()):
        meta[f"{name}/.zarray"] = a.zarray
        meta[f"{name}/.zattrs"] = a.zattrs
    return meta


def folders(out: OutLayout) -> dict[str, str]:
    """The folders the chunks' files are in, as URL templates: what readers judge (URL policy) and take
    the files' protocol from before any chunk is read."""
    names = sorted({u.rsplit("/", 1)[0] + "/" for u in out.urls})
    return {f"u{i}": name for i, name in enumerate(names)}


def provenance(out: OutLayout) -> dict[str, Any]:
    return {"combined": {"files": out.files}}


def grid_of(a: OutArray) -> tuple[int, ...]:
    return tuple(math.ceil(s / c) for s, c in zip(a.zarray["shape"], a.zarray["chunks"])) or (1,)


def sorted_rows(name: str, a: OutArray) -> tuple[np.ndarray, np.ndarray]:
    """(C-order chunk numbers, the rows in that order); two chunks at one place is a refindex bug."""
    grid = grid_of(a)
    coords = a.coords if a.coords.shape[1] else np.zeros((len(a.coords), 1), dtype=np.int64)
    lin = np.ravel_multi_index(tuple(coords.T), grid) if len(coords) else np.zeros(0, dtype=np.int64)
    order = np.argsort(lin, kind="stable")
    lin = lin[order]
    if len(lin) > 1 and not np.all(lin[1:] > lin[:-1]):
        raise RefindexError(f"internal error: variable {name!r} has two chunks at one place in the combined grid")
    return lin, order


def json_refs(out: OutLayout) -> dict[str, Any]:
    from ..model import chunk_keys
    from ..formats import consolidated, metadata_json

    meta = metadata(out)
    refs: dict[str, Any] = {k: metadata_json(v) for k, v in meta.items()}
    refs[".zmetadata"] = metadata_json(consolidated(meta))
    blob = memoryview(out.inline)
    for name, a in out.arrays.items():
        ndim = len(a.zarray["shape"])
        keys = chunk_keys(a.coords[:, :ndim])
        for key, u, off, size in zip(keys, a.url.tolist(), a.offset.tolist(), a.size.tolist()):
            key = f"{name}/{key}"
            if u < 0:
                refs[key] = "base64:" + base64.standard_b64encode(blob[off:off + size]).decode("ascii")
            else:
                refs[key] = [out.urls[u], off, size]
    return {"version": 1, "templates": folders(out), "refs": refs, "refindex": provenance(out)}


def records(a: OutArray, lin: np.ndarray, order: np.ndarray, out: OutLayout, record_size: int) -> Iterator[Any]:
    """One pyarrow Table per record of ``a`` (every record, empty ones too, as fsspec expects)."""
    import pyarrow as pa

    from ..formats import blobs, numbers

    total = math.prod(grid_of(a))
    url, offset, size = a.url[order], a.offset[order], a.size[order]
    blob = memoryview(out.inline)
    for lo in range(0, total, record_size):
        n = min(record_size, total - lo)
        i, j = np.searchsorted(lin, [lo, lo + n])
        rows = lin[i:j] - lo
        u = url[i:j]
        ref = u >= 0
        used = np.unique(u[ref])
        index = np.zeros(n, dtype=np.int32)
        index[rows[ref]] = np.searchsorted(used, u[ref])
        present = np.zeros(n, dtype=bool)
        present[rows[ref]] = True
        col_off, col_size = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        col_off[rows[ref]], col_size[rows[ref]] = offset[i:j][ref], size[i:j][ref]
        raw: list[bytes | None] = [None] * n
        for r, o, s in zip(rows[~ref].tolist(), offset[i:j][~ref].tolist(), size[i:j][~ref].tolist()):
            raw[r] = bytes(blob[o:o + s])
        names = blobs([out.urls[k].encode("utf-8") for k in used.tolist()], pa.string())
        path = pa.DictionaryArray.from_arrays(numbers(index, pa.int32(), valid=present), names)
        yield pa.Table.from_arrays([path, numbers(col_off, pa.int64()), numbers(col_size, pa.int64()),
                                    blobs(raw, pa.binary())], names=["path", "offset", "size", "raw"])


def write_parquet_folder(out: OutLayout, folder: str, record_size: int) -> None:
    from ..formats import ZMETADATA, metadata_json, write_record

    for name, a in sorted(out.arrays.items()):
        lin, order = sorted_rows(name, a)
        where = os.path.join(folder, name)
        os.makedirs(where, exist_ok=True)
        for k, table in enumerate(records(a, lin, order, out, record_size)):
            write_record(table, os.path.join(where, f"refs.{k}.parq"))
    doc = {"metadata": metadata(out), "record_size": int(record_size), "zarr_consolidated_format": 1,
           "refindex": {"templates": folders(out), **provenance(out)}}
    with open(os.path.join(folder, ZMETADATA), "w", encoding="utf-8") as fh:
        fh.write(metadata_json(doc))


def write_combined(out: OutLayout, output: str, storage_options: dict[str, Any] | None,
                   record_size: int | None = None) -> None:
    """Write ``out`` at ``output`` (JSON or parquet by its name), whole or not at all."""
    from ..formats import DEFAULT_RECORD_SIZE, atomic_folder, dumps, prepare_destination, write_json

    record_size = record_size or DEFAULT_RECORD_SIZE

    protocol, path = urls.split(output)
    if is_json(output):
        for a in out.arrays.values():
            sorted_rows("", a)  # the same check as parquet's
        refs = json_refs(out)
        if protocol == "file":
            write_json(refs, path)  # type: ignore[arg-type]
            return
        fs, p = urls.filesystem(output, storage_options)
        fs.pipe_file(p, dumps(refs).encode("utf-8"))  # one PUT: the object appears whole or not at all
        return
    if protocol == "file":
        prepare_destination(path)
        with atomic_folder(path) as tmp:
            write_parquet_folder(out, tmp, record_size)
        return
    from ._task import written_then_put

    def write(local: str) -> None:
        os.makedirs(local)
        write_parquet_folder(out, local, record_size)

    written_then_put(output, storage_options, True, write)  # no pool given: the upload is done when it returns
