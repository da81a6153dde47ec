"""Deep comparison of two NWBFiles (or any HDMF containers) read by different backends.

``assert_same_nwb(expected, actual)`` walks every container of both files, keyed by
``object_id`` (``nwbfile.objects``), and compares, for each container, its type, name,
parent and every field in ``container.fields``:

* arrays (numpy, h5py Datasets, zarr Arrays, hdmf's lazy reference datasets) are read
  fully and compared by value: numeric arrays by dtype, shape and value (NaN == NaN),
  text normalised (bytes -> str), references as the ``object_id`` of the container
  they resolve to;
* containers (nested, linked or referenced) by ``object_id``;
* DynamicTables through their columns (VectorData / VectorIndex / DynamicTableRegion are
  containers of their own, so their data and ``target``/``table`` get compared too),
  plus the flattened rows of every ragged column;
* datetimes, scalars, dicts, lists and tuples recursively.

The first difference raises ``Mismatch`` (an ``AssertionError``) naming its path: the
container's path in the container tree (names of its ancestors; ``LabelledDict``s such as
``acquisition`` are not containers), its type, the field and the element, e.g.
``/raw (ElectricalSeries).data[12, 3]: 5 != 6``.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

import numpy as np


class Mismatch(AssertionError):
    pass


def _is_container(v) -> bool:
    from hdmf.container import AbstractContainer

    return isinstance(v, AbstractContainer)


def _label(c) -> str:
    try:
        path = _container_path(c)
    except Exception:
        path = getattr(c, "name", "?")
    return f"{path} ({type(c).__name__})"


def _container_path(c) -> str:
    names = []
    while c is not None and getattr(c, "parent", None) is not None:
        names.append(c.name)
        c = c.parent
    return "/" + "/".join(reversed(names))


def _oid(c) -> str:
    return f"<{type(c).__name__} {c.name!r} {c.object_id}>"


# ---------------------------------------------------------------- array reading


def _is_lazy_array(v) -> bool:
    import h5py
    import zarr
    from hdmf.query import HDMFDataset

    return isinstance(v, (h5py.Dataset, zarr.Array, HDMFDataset))


def read_full(v) -> Any:
    """Values of a lazy dataset as numpy (plain numbers/text) or a list (resolved references)."""
    import h5py
    import zarr
    from hdmf.query import HDMFDataset

    if isinstance(v, HDMFDataset) and not isinstance(v, (h5py.Dataset, zarr.Array)):
        # hdmf's reference/compound wrappers resolve references to containers on indexing
        n = len(v)
        if n == 0:
            return []
        out = v[0:n]
        return list(out) if not isinstance(out, np.ndarray) or out.dtype == object else out
    if isinstance(v, h5py.Dataset):
        return np.asarray(v[()])  # text as bytes or str: normalised element by element
    if isinstance(v, zarr.Array):
        a = np.asarray(v[...])
        if a.dtype.kind == "T":
            a = a.astype(object)
        return a
    return v


def _norm_scalar(v):
    if isinstance(v, (bytes, np.bytes_)):
        return bytes(v).decode("utf-8")
    if isinstance(v, np.str_):
        return str(v)
    if isinstance(v, np.generic):
        return v.item()
    return v


# ---------------------------------------------------------------- comparison


class _Cmp:
    def __init__(self, exp_file, act_file, by_path: bool = False):
        self.exp_file = exp_file
        self.act_file = act_file
        self.by_path = by_path
        self.count = 0

    def fail(self, path, msg):
        raise Mismatch(f"{path}: {msg}")

    def same(self, a, b, path: str, depth: int = 0) -> None:
        self.count += 1
        if depth > 20:
            self.fail(path, "nesting too deep")
        if _is_container(a) or _is_container(b):
            if not (_is_container(a) and _is_container(b)):
                self.fail(path, f"container vs non-container: {type(a).__name__} != {type(b).__name__}")
            if self.by_path:
                if _container_path(a) != _container_path(b):
                    self.fail(path, f"{_label(a)} != {_label(b)}")
            elif a.object_id != b.object_id:
                self.fail(path, f"{_oid(a)} != {_oid(b)}")
            if type(a).__name__ != type(b).__name__:
                self.fail(path, f"type {type(a).__name__} != {type(b).__name__}")
            return
        if _is_lazy_array(a) or _is_lazy_array(b):
            return self.same(read_full(a), read_full(b), path, depth + 1)
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            return self.same_array(a, b, path, depth)
        import pandas as pd

        if isinstance(a, (pd.DataFrame, pd.Series)) or isinstance(b, (pd.DataFrame, pd.Series)):
            if type(a) is not type(b):
                self.fail(path, f"{type(a).__name__} != {type(b).__name__}")
            if isinstance(a, pd.Series):
                a, b = a.to_frame(), b.to_frame()
            self.same(list(a.columns), list(b.columns), f"{path}.columns", depth + 1)
            self.same(list(a.index), list(b.index), f"{path}.index", depth + 1)
            for col in a.columns:
                self.same(list(a[col]), list(b[col]), f"{path}[{col!r}]", depth + 1)
            return
        if isinstance(a, dict) or isinstance(b, dict):
            if not (isinstance(a, dict) and isinstance(b, dict)):
                self.fail(path, f"{type(a).__name__} != {type(b).__name__}")
            if sorted(map(str, a)) != sorted(map(str, b)):
                self.fail(path, f"keys {sorted(map(str, a))} != {sorted(map(str, b))}")
            for k in a:
                self.same(a[k], b[k], f"{path}[{k!r}]", depth + 1)
            return
        if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
            if not isinstance(a, (list, tuple)) or not isinstance(b, (list, tuple)):
                self.fail(path, f"{type(a).__name__} {a!r:.80} != {type(b).__name__} {b!r:.80}")
            if len(a) != len(b):
                self.fail(path, f"length {len(a)} != {len(b)}")
            for i, (x, y) in enumerate(zip(a, b)):
                self.same(x, y, f"{path}[{i}]", depth + 1)
            return
        a, b = _norm_scalar(a), _norm_scalar(b)
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return
        if isinstance(a, _dt.datetime) or isinstance(b, _dt.datetime):
            if a != b:
                self.fail(path, f"{a!r} != {b!r}")
            return
        if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                           and not isinstance(a, bool) and not isinstance(b, bool)):
            self.fail(path, f"type {type(a).__name__} {a!r:.80} != {type(b).__name__} {b!r:.80}")
        if a != b:
            self.fail(path, f"{a!r:.200} != {b!r:.200}")

    def same_array(self, a, b, path, depth):
        if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
            # a list (resolved references, lists of rows) against an array
            la = a.tolist() if isinstance(a, np.ndarray) and a.dtype != object else list(a) if not isinstance(a, np.ndarray) else list(a)
            lb = b.tolist() if isinstance(b, np.ndarray) and b.dtype != object else list(b) if not isinstance(b, np.ndarray) else list(b)
            return self.same(la, lb, path, depth + 1)
        if a.shape != b.shape:
            self.fail(path, f"shape {a.shape} != {b.shape}")
        if a.dtype.names is not None or b.dtype.names is not None:
            if a.dtype.names != b.dtype.names:
                self.fail(path, f"fields {a.dtype.names} != {b.dtype.names}")
            for n in a.dtype.names:
                self.same(a[n], b[n], f"{path}.{n}", depth + 1)
            return
        numeric = "biufcmM"
        if a.dtype.kind in numeric and b.dtype.kind in numeric:
            if a.dtype.newbyteorder("=") != b.dtype.newbyteorder("="):
                self.fail(path, f"dtype {a.dtype} != {b.dtype}")
            eq = (a == b) | ((a != a) & (b != b)) if a.dtype.kind in "fc" else (a == b)
            if not np.all(eq):
                idx = tuple(int(i) for i in np.argwhere(~np.asarray(eq))[0])
                self.fail(f"{path}{list(idx)}", f"{a[idx]!r} != {b[idx]!r}")
            return
        # text / objects: element by element
        fa, fb = a.reshape(-1), b.reshape(-1)
        for i, (x, y) in enumerate(zip(fa, fb)):
            idx = list(np.unravel_index(i, a.shape)) if a.ndim else []
            self.same(x, y, f"{path}{idx}", depth + 1)


def _fields(c) -> dict[str, Any]:
    return dict(c.fields)


def assert_same_container(a, b, cmp: _Cmp, label: str) -> None:
    if type(a).__name__ != type(b).__name__:
        cmp.fail(label, f"type {type(a).__name__} != {type(b).__name__}")
    if a.name != b.name:
        cmp.fail(label, f"name {a.name!r} != {b.name!r}")
    pa, pb = getattr(a, "parent", None), getattr(b, "parent", None)
    if (pa is None) != (pb is None):
        cmp.fail(label + ".parent", f"{pa and _oid(pa)} != {pb and _oid(pb)}")
    if pa is not None:
        cmp.same(pa, pb, label + ".parent")
    fa, fb = _fields(a), _fields(b)
    if sorted(fa) != sorted(fb):
        only_a = sorted(set(fa) - set(fb))
        only_b = sorted(set(fb) - set(fa))
        cmp.fail(label, f"fields differ: only expected {only_a}, only actual {only_b}")
    for name in sorted(fa):
        cmp.same(fa[name], fb[name], f"{label}.{name}")
    # DynamicTables: also compare rows through the table's own accessors (ragged columns
    # resolved through their VectorIndex, regions through their target table)
    from hdmf.common import VectorIndex

    if isinstance(a, VectorIndex) and len(a.data) and len(b.data):
        for i in range(len(a)):
            cmp.same(a[i], b[i], f"{label}[row {i}]")


def assert_same_nwb(expected, actual) -> int:
    """Assert two files hold the same containers and field values; returns values compared.

    ``expected`` is typically ``NWBHDF5IO(...).read()``, ``actual`` the same file read by
    another backend.  Containers are matched by ``object_id`` when the file stores them;
    files written before NWB 2.0's object ids get fresh random ids on every read, so
    there containers are matched (and references compared) by their path in the file.
    """
    ids_stored = expected.object_id == actual.object_id
    cmp = _Cmp(expected, actual, by_path=not ids_stored)

    def keyed(f):
        out = {}
        for oid, c in f.objects.items():
            k = oid if ids_stored else f"{_container_path(c)} ({type(c).__name__})"
            if k in out:
                raise Mismatch(f"two containers at {k}")
            out[k] = c
        return out

    ea, eb = keyed(expected), keyed(actual)
    if set(ea) != set(eb):
        missing = [_label(ea[k]) for k in sorted(set(ea) - set(eb))]
        extra = [_label(eb[k]) for k in sorted(set(eb) - set(ea))]
        raise Mismatch(f"containers differ: missing {missing[:10]}, unexpected {extra[:10]}")
    for k in sorted(ea, key=lambda k: _container_path(ea[k])):
        assert_same_container(ea[k], eb[k], cmp, _label(ea[k]))
    return cmp.count


def assert_same_builders(a, b, path: str = "/", ignore_attrs=("_ARRAY_DIMENSIONS",)) -> int:
    """Compare two hdmf builder trees (``io.read_builder()``) by attributes, data, groups and links.

    For HDMF files whose containers cannot be constructed (e.g. an old spec that hdmf
    itself can no longer map), this still shows both backends read the same thing.
    """
    from hdmf.build import DatasetBuilder, GroupBuilder, LinkBuilder, ReferenceBuilder

    cmp = _Cmp(None, None)

    def attrs(x):
        return {k: v for k, v in x.attributes.items() if k not in ignore_attrs}

    def value(v):
        if isinstance(v, (GroupBuilder, DatasetBuilder)):
            return ("builder", v.path)
        if isinstance(v, ReferenceBuilder):
            return ("ref", v.builder.path)
        return v

    def walk(x, y, p):
        if type(x) is not type(y):
            cmp.fail(p, f"{type(x).__name__} != {type(y).__name__}")
        ax, ay = attrs(x), attrs(y)
        if sorted(ax) != sorted(ay):
            cmp.fail(p, f"attributes {sorted(ax)} != {sorted(ay)}")
        for k in ax:
            cmp.same(value(ax[k]), value(ay[k]), f"{p}@{k}")
        if isinstance(x, DatasetBuilder):
            cmp.same(read_full(x.data), read_full(y.data), f"{p}.data")
            return
        for kind in ("groups", "datasets", "links"):
            cx, cy = getattr(x, kind), getattr(y, kind)
            if sorted(cx) != sorted(cy):
                cmp.fail(p, f"{kind} {sorted(cx)} != {sorted(cy)}")
            for k in cx:
                if kind == "links":
                    assert isinstance(cx[k], LinkBuilder)
                    cmp.same(cx[k].builder.path, cy[k].builder.path, f"{p}/{k} (link)")
                else:
                    walk(cx[k], cy[k], f"{p.rstrip('/')}/{k}")

    walk(a, b, path)
    return cmp.count
