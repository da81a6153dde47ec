"""refindex's own notes on a node of a plain index, kept out of the attributes xarray shows."""

from __future__ import annotations

from typing import Any


def notes(index: Any, path: str, *, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """refindex's own attributes of node ``path`` ("a/b", "" for the root) of a plain index, e.g.
    ``refindex_view_dtype`` (the numpy type to view long doubles' raw bytes as), ``refindex_inlined``
    (why values were copied in), ``refindex_enum`` (an enum's labels), ``zarr_link`` (links kept as
    entries).  A plain index keeps them in its provenance (``hidden_attributes``), out of the zarr
    attributes xarray shows; an HDMF index keeps them in the node's attributes (empty here).

    ``index``: a refs dict, a JSON index or a parquet folder (path or URL).
    """
    from ...conventions import hidden_attributes
    from ..index._load import load_refs, parquet_metadata

    refs = load_refs(index, storage_options)
    prov = (refs if isinstance(refs, dict) else parquet_metadata(refs, storage_options)).get("refindex") or {}
    return hidden_attributes(prov, "/" + str(path).strip("/"))
