"""Consolidated metadata (``.zmetadata``, zarr v2 format 1): check it and open through it.

An index on object storage is read by key; without consolidation every group and
array costs its own ``.zgroup``/``.zarray``/``.zattrs`` lookups.  zarr 3's own
``open_group`` still fetches the root ``.zgroup`` and ``.zattrs`` next to
``.zmetadata``; ``open_group`` here builds the group from ``.zmetadata`` alone, so
opening and walking a whole hierarchy asks the store for exactly one key.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from ...errors import RefindexError

METADATA_NAMES = (".zgroup", ".zarray", ".zattrs")
CONSOLIDATED_KEY = ".zmetadata"
V3_ROOT = "zarr.json"


def is_metadata_key(key: str) -> bool:
    return key.rsplit("/", 1)[-1] in METADATA_NAMES


def _decode(key: str, value: Any) -> Any:
    """A metadata value of an RFS as a JSON document (values are JSON text, maybe inline bytes)."""
    if isinstance(value, (dict, list)):
        return value
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str) and value.startswith("base64:"):
        value = base64.standard_b64decode(value[7:]).decode("utf-8")
    if not isinstance(value, str):
        raise RefindexError(f"metadata key {key!r} is not inline JSON text")
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise RefindexError(f"metadata key {key!r} is not valid JSON: {e}") from e


def per_node_metadata(refs: dict[str, Any]) -> dict[str, Any]:
    """Every ``.zgroup``/``.zarray``/``.zattrs`` document of an RFS dict, by key."""
    return {k: _decode(k, v) for k, v in (refs.get("refs") or {}).items() if is_metadata_key(k)}


def consolidated_metadata(refs: dict[str, Any]) -> dict[str, Any] | None:
    """The ``metadata`` mapping of the index's ``.zmetadata``, or None when it has none."""
    value = (refs.get("refs") or {}).get(CONSOLIDATED_KEY)
    if value is None:
        return None
    doc = _decode(CONSOLIDATED_KEY, value)
    return metadata_of(doc)


def metadata_of(doc: Any) -> dict[str, Any]:
    # fsspec's parquet layout keeps *all* metadata in its .zmetadata (with "record_size"
    # instead of the format number); there it is the per-node source itself.
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict) or (
        doc.get("zarr_consolidated_format") != 1 and "record_size" not in doc
    ):
        raise RefindexError(".zmetadata is not zarr v2 consolidated metadata (zarr_consolidated_format 1)")
    meta: dict[str, Any] = doc["metadata"]
    return meta


def _canonical(doc: Any) -> str:
    # Text comparison: NaN attributes never compare equal as floats.
    return json.dumps(doc, sort_keys=True, allow_nan=True, ensure_ascii=False)


def consolidation_differences(refs: dict[str, Any]) -> list[str]:
    """How ``.zmetadata`` differs from the per-node documents (empty when they agree exactly)."""
    cons = consolidated_metadata(refs)
    if cons is None:
        return ["no .zmetadata"]
    nodes = per_node_metadata(refs)
    out = []
    for key in sorted(set(nodes) | set(cons)):
        if key not in cons:
            out.append(f"{key}: missing from .zmetadata")
        elif key not in nodes:
            out.append(f"{key}: in .zmetadata but not in the index")
        elif _canonical(cons[key]) != _canonical(nodes[key]):
            out.append(f"{key}: differs from .zmetadata")
    return out


def group_document(metadata: dict[str, Any]) -> dict[str, Any]:
    """zarr 3's in-memory group document (root attributes + inline consolidated members)."""
    if ".zgroup" not in metadata:
        raise RefindexError(".zmetadata has no root .zgroup")
    members: dict[str, dict[str, Any]] = {}
    for key, doc in metadata.items():
        if "/" not in key:
            continue
        path, name = key.rsplit("/", 1)
        if name == ".zattrs":
            members.setdefault(path, {})["attributes"] = doc
        elif name in (".zarray", ".zgroup"):
            members.setdefault(path, {}).update(doc)
    for path, doc in members.items():
        if "zarr_format" not in doc:
            raise RefindexError(f"{path}: .zattrs without .zarray or .zgroup in .zmetadata")
    return {
        **metadata[".zgroup"],
        "attributes": metadata.get(".zattrs", {}),
        "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": members},
    }


def open_group(store: Any) -> Any:
    """A read-only ``zarr.Group`` built from ``.zmetadata`` (one store request).

    Falls back to zarr's per-node reading when the index has no ``.zmetadata`` (it is
    optional in the format); a damaged one is an error, never silently ignored.  A zarr
    v3 index (a root ``zarr.json``; a parquet one lists it in its ``.zmetadata``) is opened
    by zarr itself, from the consolidated metadata in that document (one request too).
    """
    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.group import AsyncGroup
    from zarr.core.sync import sync
    from zarr.storage import StorePath

    buf = sync(store.get(CONSOLIDATED_KEY, prototype=default_buffer_prototype()))
    if buf is None:
        if sync(store.get(V3_ROOT, prototype=default_buffer_prototype())) is not None:
            return zarr.open_group(store, mode="r", zarr_format=3)
        return zarr.open_group(store, mode="r", zarr_format=2, use_consolidated=False)
    try:
        doc = json.loads(buf.to_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RefindexError(f".zmetadata is not valid JSON: {e}") from e
    if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) and V3_ROOT in doc["metadata"]:
        return zarr.open_group(store, mode="r", zarr_format=3)  # a zarr v3 parquet index
    group = AsyncGroup.from_dict(StorePath(store, path=""), group_document(metadata_of(doc)))
    return zarr.Group(group)
