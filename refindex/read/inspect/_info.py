"""A summary of an index: groups, arrays, chunks referenced, inline bytes and options, sources."""

from __future__ import annotations

import json
from typing import Any

from ... import urls
from ..index._load import load_index, parquet_metadata
from ..index._names import CacheSetting


class IndexInfo(dict):
    """What :func:`info` returns: a plain dict (JSON-ready), shown as a table in a notebook."""

    def _repr_html_(self) -> str:
        from ...feedback.display import fields

        size = self.get("bytes_referenced", 0) + self.get("inline_bytes", 0)
        rows = [("format", f"{self.get('format', 'json')}, zarr v{self.get('zarr_format')}"),
                ("convention", self.get("convention")), ("groups", self.get("groups")),
                ("arrays", self.get("arrays")), ("chunks referenced", self.get("chunks_referenced")),
                ("bytes referenced", self.get("bytes_referenced")),
                ("inline chunks", self.get("inline_chunks")), ("inline bytes", self.get("inline_bytes")),
                ("data described", f"{size / 1e6:,.1f} MB"), ("sources", self.get("sources")),
                ("codecs", [f"{c} ({pkg})" for c, pkg in (self.get("codecs") or {}).items()]),
                ("needs refindex's codecs", self.get("needs_refindex") or None),
                ("skipped", [s.get("path", s) if isinstance(s, dict) else s for s in self.get("skipped") or []] or None)]
        rows += [(k, self[k]) for k in ("repository", "group", "snapshot", "containers") if k in self]
        return fields(rows, title="refindex index")


def info(refs: Any, *, storage_options: dict[str, Any] | None = None, cache: CacheSetting = True,
         group: str | None = None, branch: str | None = None, snapshot: str | None = None) -> IndexInfo:
    """Summary of an index (or of an HDF5 file's index, made on the fly): groups, arrays, chunks
    referenced, inline bytes, source files, and the options that decided what is inline.
    An Icechunk repository's group (``group``/``branch``/``snapshot``) adds its ``containers``."""
    from ..index._icechunk import icechunk_index

    ic = icechunk_index(refs, storage_options=storage_options, group=group, branch=branch, snapshot=snapshot)
    if ic is not None:
        return IndexInfo(_icechunk_info(ic))
    r, _ = load_index(refs, storage_options=storage_options, cache=cache)
    if not isinstance(r, dict):
        return IndexInfo(_parquet_info(r, storage_options))
    groups = arrays = chunks = inline_keys = inline_bytes = 0
    referenced = 0
    docs: list[dict[str, Any]] = []
    for key, value in r.get("refs", {}).items():
        base = key.rsplit("/", 1)[-1]
        if base == ".zgroup":
            groups += 1
        elif base == ".zarray":
            arrays += 1
            docs.append(json.loads(value) if isinstance(value, str) else value)
        elif base == "zarr.json":  # zarr v3: one document per node
            doc = json.loads(value) if isinstance(value, (str, bytes)) else value
            if doc.get("node_type") == "array":
                arrays += 1
                docs.append(doc)
            else:
                groups += 1
        elif base.startswith("."):
            continue
        elif isinstance(value, list):
            chunks += 1
            referenced += int(value[2]) if len(value) > 2 else 0
        else:
            inline_keys += 1
            inline_bytes += _inline_size(value)
    return IndexInfo(_summary(groups, arrays, chunks, referenced, inline_keys, inline_bytes, r.get("templates"),
                              r.get("refindex", {}), docs))


def _summary(groups: int, arrays: int, chunks: int, referenced: int, inline_keys: int, inline_bytes: int,
             templates: dict[str, str] | None, prov: dict[str, Any], docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The dict :func:`info` returns, for JSON and parquet indexes alike.

    ``codecs``: every codec id the arrays use, with the package a reader needs for it
    (numcodecs, imagecodecs or refindex; zarr for v3's own); ``needs_refindex``: those only
    refindex provides; ``zarr_format``: 2 or 3 (the v3 names need ``imagecodecs.zarr``'s
    codecs registered, refindex's their ``zarr.codecs`` entry points).
    """
    from ...codecs import codec_ids, codec_names, codec_provider, codec_provider_v3

    v3 = any(d.get("zarr_format") == 3 for d in docs) or prov.get("zarr_format") == 3
    used = ({name: codec_provider_v3(name) for name in codec_names(docs)} if v3 else
            {cid: codec_provider(cid) for cid in codec_ids(docs)})
    return {
        "zarr_format": 3 if v3 else 2,
        "groups": groups,
        "arrays": arrays,
        "chunks_referenced": chunks,
        "bytes_referenced": referenced,
        "inline_chunks": inline_keys,
        "inline_bytes": inline_bytes,
        "sources": sorted((templates or {}).values()),
        "convention": prov.get("convention"),
        "inline_options": {k: (prov.get("options") or {}).get(k)
                           for k in ("inline_threshold", "inline_dataset_threshold", "inline_max")},
        "skipped": prov.get("skipped", []),
        "pages": pages_summary(prov.get("pages")),
        "codecs": used,
        "needs_refindex": sorted(c for c, pkg in used.items() if pkg == "refindex"),
    }


def pages_summary(doc: Any) -> dict[str, Any] | None:
    """What the index carries for the h5py road (None: no pages): the file's bytes it holds, what they
    take in the index, and the chunk indexes left out (fetched whole when a read first needs one);
    ``in_file``: none, the file is small enough to be fetched whole when it is opened."""
    if not isinstance(doc, dict):
        return None
    if "object" in doc:  # an Icechunk repository: an object of its own, named by the commit
        return {"stored_bytes": doc.get("bytes"), "object": doc.get("object")}
    from ...formats import encoded_size

    out = {"bytes": doc.get("bytes"), "stored_bytes": encoded_size(doc), "page_size": doc.get("page_size"),
           "chunk_indexes_left_out": len(doc.get("index_ranges") or {})}
    if doc.get("in_file"):  # a small file: fetched whole with the freshness check instead
        out["in_file"] = True
    return out


def _icechunk_info(ic: Any) -> dict[str, Any]:
    """``info`` of a group of an Icechunk repository: node counts and codecs from its documents, chunk
    counts and source from the record its commit left, and the containers a reader authorizes."""
    docs = list(ic.documents().values())
    arrays = [d for d in docs if d.get("node_type") == "array"]
    rec = ic.record()
    counts = rec.get("counts") or {}
    out = _summary(len(docs) - len(arrays), len(arrays), int(counts.get("chunks_referenced", 0)),
                   int(counts.get("bytes_referenced", 0)), int(counts.get("inline_chunks", 0)),
                   int(counts.get("inline_bytes", 0)), None, rec | {"zarr_format": 3}, arrays)
    out.update(format="icechunk", repository=ic.repository, group="/" + ic.group.strip("/"),
               snapshot=ic.open().snapshot_id, containers=ic.containers,
               sources=sorted({(rec.get("source") or {}).get("url")} - {None}))
    return out


def _inline_size(value: str) -> int:
    """Bytes an inline value stands for ("base64:..." text decodes; other text is UTF-8)."""
    if value.startswith("base64:"):
        b64 = value[7:]
        return len(b64) * 3 // 4 - b64[-2:].count("=")
    return len(value.encode("utf-8"))


def _parquet_info(folder: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """``info`` of a parquet index: metadata from ``.zmetadata``, counts from the record files."""
    doc = parquet_metadata(folder, storage_options)
    fs, root = urls.filesystem(folder, storage_options)
    meta = doc.get("metadata", {})
    if "zarr.json" in meta:  # zarr v3: one document per node, plus a .zarray shape per array for fsspec
        v3 = {k[: -len("zarr.json")].rstrip("/"): d for k, d in meta.items() if k.rsplit("/", 1)[-1] == "zarr.json"}
        docs = [d for d in v3.values() if d.get("node_type") == "array"]
        return _parquet_counts(fs, root, groups=len(v3) - len(docs), docs=docs, prov=doc.get("refindex", {}),
                               arrays=[k for k, d in v3.items() if d.get("node_type") == "array"])
    groups = sum(k.rsplit("/", 1)[-1] == ".zgroup" for k in meta)
    arrays = [k[: -len(".zarray")].rstrip("/") for k in meta if k.rsplit("/", 1)[-1] == ".zarray"]
    docs = [meta[k] for k in meta if k.rsplit("/", 1)[-1] == ".zarray"]
    docs = [json.loads(d) if isinstance(d, str) else d for d in docs]
    return _parquet_counts(fs, root, groups=groups, arrays=arrays, docs=docs, prov=doc.get("refindex", {}))


def _parquet_counts(fs: Any, root: str, *, groups: int, arrays: list[str], docs: list[dict[str, Any]],
                    prov: dict[str, Any]) -> dict[str, Any]:
    """``info`` of a parquet index from its documents and the counts in its record files."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    chunks = inline_keys = inline_bytes = referenced = 0
    for array in arrays:
        base = root.rstrip("/") + "/" + array if array else root.rstrip("/")
        for path in sorted(fs.glob(base + "/refs.*.parq")):
            with fs.open(path, "rb") as fh:
                table = pq.read_table(fh, columns=["path", "size", "raw"])
            has_path = pc.is_valid(table["path"])
            chunks += pc.sum(has_path).as_py() or 0
            referenced += pc.sum(pc.if_else(has_path, table["size"], 0)).as_py() or 0
            raw_valid = pc.is_valid(table["raw"])
            inline_keys += pc.sum(raw_valid).as_py() or 0
            inline_bytes += pc.sum(pc.binary_length(pc.drop_null(table["raw"]))).as_py() or 0
    return _summary(groups, len(arrays), chunks, referenced, inline_keys, inline_bytes, prov.get("templates"),
                    prov, docs) | {"format": "parquet"}
