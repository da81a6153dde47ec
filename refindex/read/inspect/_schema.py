"""The hierarchy of an index as a Zarr Object Model (ZEP 6, zarr v2 flavour), and checks against one.

A ZOM describes the *structure* of a hierarchy (groups, arrays, their metadata and
attributes) without data.  ``object_model`` builds it from an index's metadata
documents; ``check`` uses a ZOM document as a template, so a collection of files can be
held to one layout (a lab's NWB files, a netCDF product) before anyone reads them.

Template rules (a template is any v2 ZOM group document, e.g. one printed by
``refindex schema``, edited down to what matters):

* Every member a group's ``members`` names must exist, with the same kind.  A node is
  an array when it has ``shape`` or ``dtype`` (or ``"node_type": "array"``), otherwise a
  group.  Members the template does not name are allowed; a group without ``members``
  requires nothing below it.
* Every attribute a node's ``attributes`` names must exist.  Values are not compared
  (object ids, timestamps differ per file) unless the node says ``"pin_attributes": true``
  (all named values must be equal) or ``"pin_attributes": ["name", ...]`` (those ones).
* Arrays: ``dtype`` must match, byte order ignored (``<f8`` matches ``>f8``); the number
  of dimensions must match ``len(shape)``.  Shapes may differ unless the template array
  says ``"pin_shape": true``: then every length must be equal, except entries written as
  ``null``, which match any length (``"shape": [null, 3]`` pins only the second axis).
  ``chunks``, ``compressor``, ``filters``, ``fill_value`` and ``order`` are storage
  choices and are not checked.

Differences are reported as ``(path, message)`` with HDF5-style paths ("/", "/a/b").
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict, Union, Unpack

from ...errors import RefindexError
from ...options import ScanKeywords, ScanOptions, options_from
from ..zarr_store._consolidated import is_metadata_key, per_node_metadata
from ..index._load import load_index, parquet_metadata
from ..index._names import CacheSetting



class ArrayModel(TypedDict):
    """A zarr v2 array in a ZOM: the ``.zarray`` fields plus ``attributes``."""

    zarr_format: Literal[2]
    shape: list[int]
    chunks: list[int]
    dtype: Any  # "<f8", "|O", or a list of [name, dtype(, shape)] fields
    compressor: dict[str, Any] | None
    filters: list[dict[str, Any]] | None
    fill_value: Any
    order: Literal["C", "F"]
    dimension_separator: Literal[".", "/"]
    attributes: NotRequired[dict[str, Any]]


class GroupModel(TypedDict):
    """A zarr v2 group in a ZOM; ``members`` is absent below a ``depth`` cut (not listed, not empty)."""

    zarr_format: Literal[2]
    attributes: NotRequired[dict[str, Any]]
    members: NotRequired[dict[str, "NodeModel"]]


NodeModel = Union[ArrayModel, GroupModel]


class Difference(NamedTuple):
    path: str
    message: str


@dataclass
class CheckReport:
    """Outcome of ``check``: ``ok`` when the index has everything the template names."""

    differences: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        if self.ok:
            return "matches the template"
        return f"{len(self.differences)} difference(s) from the template"

    def _repr_html_(self) -> str:
        from ...feedback.display import table, verdict

        title = verdict(self.ok, self.summary())
        return table(["path", "difference"], self.differences, title=title) if self.differences else f"<p>{title}</p>"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (for manifests)."""
        return {"ok": self.ok, "differences": [{"path": p, "message": m} for p, m in self.differences]}


# ---------------------------------------------------------------- building a ZOM


def load_metadata(refs_or_file: Any, *, storage_options: dict[str, Any] | None = None,
                  options: ScanOptions | None = None, cache: CacheSetting = True) -> dict[str, Any]:
    """Every zarr v2 metadata document (key -> JSON) of an index dict, JSON/parquet index or HDF5 file.

    An HDF5 file is indexed first (through the local index cache, see :mod:`refindex.read`).
    """
    from ..index._icechunk import icechunk_index

    ic = icechunk_index(refs_or_file, storage_options=storage_options)
    if ic is not None:  # an Icechunk repository: its documents as a v3 index holds them
        return {k: _without_consolidated(v) for k, v in ic.documents().items()}
    loaded, _ = load_index(refs_or_file, storage_options=storage_options, cache=cache, options=options)
    if isinstance(loaded, dict):
        if "zarr.json" in (loaded.get("refs") or {}):
            return {k: _without_consolidated(_v3_doc(v)) for k, v in loaded["refs"].items() if _is_v3_key(k)}
        return per_node_metadata(loaded)
    meta = parquet_metadata(loaded, storage_options)["metadata"]  # fsspec's layout keeps every document there
    if "zarr.json" in meta:
        return {k: _without_consolidated(v) for k, v in meta.items() if _is_v3_key(k)}
    return {k: v for k, v in meta.items() if is_metadata_key(k)}


def _is_v3_key(key: str) -> bool:
    return key.rsplit("/", 1)[-1] == "zarr.json"


def _v3_doc(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def _without_consolidated(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "consolidated_metadata"}


def _array_model(zarray: dict[str, Any]) -> ArrayModel:
    return {
        "zarr_format": 2,
        "shape": list(zarray["shape"]),
        "chunks": list(zarray["chunks"]),
        "dtype": zarray["dtype"],
        "compressor": zarray.get("compressor"),
        "filters": zarray.get("filters"),
        "fill_value": zarray.get("fill_value"),
        "order": zarray.get("order", "C"),
        "dimension_separator": zarray.get("dimension_separator", "."),
    }


def model_from_metadata(
    metadata: dict[str, Any], *, members_only: bool = False, depth: int | None = None
) -> GroupModel:
    """The ZOM of a flat metadata mapping (``"a/b/.zarray"`` -> document).

    ``members_only``: leave out ``attributes`` (structure and array properties only).
    ``depth``: list members down to this many levels below the root (0: the root alone).
    """
    if depth is not None and depth < 0:
        raise RefindexError("depth must be 0 or more")
    if "zarr.json" in metadata:
        return _v3_model(metadata, members_only=members_only, depth=depth)
    root: GroupModel = {"zarr_format": 2, "members": {}}
    nodes: dict[str, NodeModel] = {"": root}
    attrs: dict[str, dict[str, Any]] = {}
    # Arrays, then groups, then attributes; parents made on the way (keys sort children after parents).
    for key in sorted(metadata, key=lambda k: (k.count("/"), k)):
        path, _, name = key.rpartition("/")
        doc = metadata[key]
        if name == ".zattrs":
            attrs[path] = doc
            continue
        node: NodeModel = _array_model(doc) if name == ".zarray" else {"zarr_format": 2, "members": {}}
        if path == "":
            if name == ".zarray":
                raise RefindexError("the root of the index is an array, not a group")
            continue
        nodes[path] = node
        parent = _ensure_group(nodes, path.rpartition("/")[0])
        parent.setdefault("members", {})[path.rpartition("/")[2]] = node
    for path, node in nodes.items():
        if not members_only:
            node["attributes"] = attrs.get(path, {})
    _order(root)
    if depth is not None:
        _trim(root, depth)
    return root


def _v3_model(metadata: dict[str, Any], *, members_only: bool, depth: int | None) -> GroupModel:
    """The ZOM of zarr v3 documents (``"a/b/zarr.json"`` -> document): each node is its
    ``zarr.json`` (no consolidated copy), groups with ``members``."""
    nodes: dict[str, Any] = {}
    for key in sorted(metadata, key=lambda k: (k.count("/"), k)):
        path = key[: -len("zarr.json")].rstrip("/")
        doc = dict(metadata[key])
        attrs = doc.pop("attributes", {})
        node: Any = {"zarr_format": 3, "members": {}} if doc.get("node_type") != "array" else doc
        if node is not doc:
            node["node_type"] = "group"
        if not members_only:
            node["attributes"] = attrs
        nodes[path] = node
        if path:
            parent = path.rpartition("/")[0]
            if parent not in nodes or "members" not in nodes[parent]:
                raise RefindexError(f"/{path} has no parent group in the index")
            nodes[parent]["members"][path.rpartition("/")[2]] = node
    if "" not in nodes or "members" not in nodes[""]:
        raise RefindexError("the root of the index is not a group")
    root = nodes[""]
    _order(root)
    if depth is not None:
        _trim(root, depth)
    return root


def _ensure_group(nodes: dict[str, NodeModel], path: str) -> GroupModel:
    node = nodes.get(path)
    if node is None:  # a member whose parent has no .zgroup: still place it
        node = {"zarr_format": 2, "members": {}}
        nodes[path] = node
        _ensure_group(nodes, path.rpartition("/")[0]).setdefault("members", {})[path.rpartition("/")[2]] = node
    if "shape" in node:
        raise RefindexError(f"/{path} is an array but has members")
    return node


def _order(group: GroupModel) -> None:
    """Keys in ZOM order (properties, attributes, members), members sorted by name."""
    members = group.get("members")
    if members is None:
        return
    group["members"] = {k: members[k] for k in sorted(members)}
    for m in group["members"].values():
        if "members" in m:
            _order(m)  # type: ignore[arg-type]
    if "attributes" in group:
        a = group.pop("attributes")
        m2 = group.pop("members")
        group["attributes"] = a
        group["members"] = m2


def _trim(group: GroupModel, depth: int) -> None:
    members = group.get("members")
    if members is None:
        return
    if depth == 0:
        del group["members"]
        return
    for m in members.values():
        if "members" in m:
            _trim(m, depth - 1)  # type: ignore[arg-type]


def object_model(
    refs_or_file: Any,
    *,
    members_only: bool = False,
    depth: int | None = None,
    storage_options: dict[str, Any] | None = None,
    **keywords: Unpack[ScanKeywords],
) -> GroupModel:
    """The Zarr Object Model (ZEP 6, zarr v2) of an index (dict, JSON/parquet path or URL) or HDF5 file.

    No data is read: groups carry ``attributes`` and ``members``; arrays their ``.zarray``
    fields and ``attributes``.  See ``model_from_metadata`` for ``members_only``/``depth``.
    ``keywords``: scan options for an HDF5 input (e.g. ``convention``).
    """
    meta = load_metadata(refs_or_file, storage_options=storage_options, options=options_from(None, keywords))
    return model_from_metadata(meta, members_only=members_only, depth=depth)


def dumps(model: GroupModel) -> str:
    return json.dumps(model, indent=2, allow_nan=True, ensure_ascii=False)


# ---------------------------------------------------------------- checking against a template


def load_template(template: Any) -> dict[str, Any]:
    """A template from a dict or a JSON file; it must be a ZOM group."""
    if isinstance(template, dict):
        doc = template
    else:
        path = os.fspath(template)
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except FileNotFoundError as e:
            raise RefindexError("template not found", file=path) from e
        except json.JSONDecodeError as e:
            raise RefindexError(f"template is not valid JSON: {e}", file=path) from e
    if not isinstance(doc, dict) or _is_array(doc):
        raise RefindexError("a template must be a ZOM group (a JSON object with attributes/members)")
    return doc


def _is_array(node: dict[str, Any]) -> bool:
    kind = node.get("node_type")
    if kind is not None:
        return bool(kind == "array")
    return "shape" in node or "dtype" in node


def _child(path: str, name: str) -> str:
    return ("" if path == "/" else path) + "/" + name


def _plain_dtype(d: Any) -> Any:
    """A dtype with byte order removed, so "<f8" and ">f8" compare equal."""
    if isinstance(d, str):
        return d.lstrip("<>|=")
    if isinstance(d, list):
        return [[f[0], _plain_dtype(f[1]), *f[2:]] if isinstance(f, list) and len(f) >= 2 else f for f in d]
    return d


def _compare(tmpl: dict[str, Any], node: dict[str, Any], path: str, out: list[Difference]) -> None:
    t_array = _is_array(tmpl)
    n_array = "shape" in node
    if t_array != n_array:
        want, got = ("an array", "a group") if t_array else ("a group", "an array")
        out.append(Difference(path, f"expected {want}, found {got}"))
        return
    attrs = node.get("attributes") or {}
    pin = tmpl.get("pin_attributes", False)
    t_attrs = tmpl.get("attributes") or {}
    if not isinstance(t_attrs, dict):
        raise RefindexError(f"template {path}: attributes must be an object")
    for name, value in t_attrs.items():
        if name not in attrs:
            out.append(Difference(path, f"attribute {name!r} is missing"))
        elif (pin is True or (isinstance(pin, list) and name in pin)) and json.dumps(
            attrs[name], sort_keys=True, allow_nan=True
        ) != json.dumps(value, sort_keys=True, allow_nan=True):
            out.append(Difference(path, f"attribute {name!r} is {attrs[name]!r}, expected {value!r}"))
    if t_array:
        _compare_array(tmpl, node, path, out)
        return
    t_members = tmpl.get("members") or {}
    if not isinstance(t_members, dict):
        raise RefindexError(f"template {path}: members must be an object")
    members = node.get("members") or {}
    for name, t_child in t_members.items():
        child = _child(path, name)
        if not isinstance(t_child, dict):
            raise RefindexError(f"template {child}: a member must be an object")
        if name not in members:
            kind = "array" if _is_array(t_child) else "group"
            out.append(Difference(child, f"{kind} is missing"))
        else:
            _compare(t_child, members[name], child, out)


def _compare_array(tmpl: dict[str, Any], node: dict[str, Any], path: str, out: list[Difference]) -> None:
    for name in ("dtype", "data_type"):  # zarr v2's (byte order ignored) and v3's (which has none)
        if name in tmpl and _plain_dtype(tmpl[name]) != _plain_dtype(node.get(name)):
            out.append(Difference(path, f"{name} is {json.dumps(node.get(name))}, expected {json.dumps(tmpl[name])}"))
    if "shape" not in tmpl:
        return
    t_shape, shape = list(tmpl["shape"]), list(node["shape"])
    if len(t_shape) != len(shape):
        out.append(Difference(path, f"{len(shape)} dimension(s) {shape}, expected {len(t_shape)}"))
    elif tmpl.get("pin_shape") is True and any(t is not None and t != s for t, s in zip(t_shape, shape)):
        out.append(Difference(path, f"shape is {shape}, expected {t_shape}"))


def check(
    template: Any,
    refs_or_file: Any,
    *,
    storage_options: dict[str, Any] | None = None,
    **keywords: Unpack[ScanKeywords],
) -> CheckReport:
    """Check an index (or HDF5 file, scanned first) against a ZOM template (dict or JSON path).

    See the module docstring for what a template requires.  Never raises for a
    mismatch: every difference is in the report; a bad template or unreadable input
    raises ``RefindexError``.
    """
    tmpl = load_template(template)
    model = object_model(refs_or_file, storage_options=storage_options, **keywords)
    out: list[Difference] = []
    _compare(tmpl, dict(model), "/", out)
    return CheckReport(out)
