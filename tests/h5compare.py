"""Two h5py Files compared object by object: every link, group, dataset, attribute and reference.

``assert_same_h5(expected, actual)`` walks every link of both files (``visit_links``: soft and
external links included) and compares link kinds and values, object kinds, dataset
shapes, dtypes and values (datasets above 8 MiB in three windows: start, middle, end),
attributes (names and values) and references (by the object they lead to).  Values are compared byte for byte where they are numbers or
fixed-size records; a read that fails must fail the same way in both files.
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np


def _outcome(call) -> tuple[str, Any]:
    try:
        return "ok", call()
    except Exception as e:  # noqa: BLE001 - the same failure on both sides is equality
        return "error", type(e).__name__


def canon(v: Any, f: h5py.File) -> Any:
    """A value as comparable Python data: references by their target, numbers by their bytes."""
    if isinstance(v, (h5py.Reference, h5py.RegionReference)):  # by the object's address (a name is a search)
        kind = "region" if isinstance(v, h5py.RegionReference) else "ref"
        return (kind, h5py.h5g.get_objinfo(h5py.h5r.dereference(v, f.id)).objno if v else None)
    if isinstance(v, np.ndarray):
        if v.dtype.hasobject:
            if v.dtype.names:
                return [v.dtype.descr.__repr__(), [canon(v[n], f) for n in v.dtype.names]]
            return [str(v.shape), [canon(x, f) for x in v.reshape(-1)]]
        return [str(v.dtype), v.shape, np.ascontiguousarray(v).tobytes()]
    if isinstance(v, np.void):
        return canon(np.asarray(v), f)
    if isinstance(v, np.generic):
        return [str(v.dtype), v.tobytes()]
    if isinstance(v, (list, tuple)):
        return [canon(x, f) for x in v]
    return v


WHOLE_MAX = 8 << 20  # datasets up to this many bytes are compared whole, larger ones in windows


def _windows(d: h5py.Dataset) -> list[Any]:
    """Selections that read a dataset: all of it, or (large ones) a corner at its start, middle and end
    along axis 0, each within a third of WHOLE_MAX."""
    if not d.shape or d.size * max(1, d.dtype.itemsize) <= WHOLE_MAX:
        return [()]
    budget = max(1, WHOLE_MAX // 3 // max(1, d.dtype.itemsize))
    rest = []
    for n in reversed(d.shape[1:]):  # trailing axes cut to what the budget allows
        k = max(1, min(n, budget))
        rest.insert(0, slice(0, k))
        budget = max(1, budget // k)
    n0 = max(1, min(d.shape[0], budget))
    starts = sorted({0, max(0, d.shape[0] // 2 - n0 // 2), max(0, d.shape[0] - n0)})
    return [(slice(a, a + n0), *rest) for a in starts]


def _attrs(obj: Any, f: h5py.File) -> dict[str, Any]:
    out = {}
    for name in obj.attrs:
        out[name] = _outcome(lambda: canon(obj.attrs[name], f))
    return out


def assert_h5py_road_equal(path: str, refs: dict[str, Any]) -> int:
    """h5py over ``refindex.h5py_file(refs)`` sees the file at ``path`` as h5py sees the file itself.

    Virtual datasets whose sources are other files cannot be read through h5py's file-object
    driver: the road must say so when it opens, and their values are not compared; nor are the
    objects the index skipped (h5py crashes on some of them).
    """
    import warnings

    import refindex

    unread = {s["path"] for s in refs["refindex"].get("skipped", [])}
    elsewhere = refs["refindex"]["pages"]["reads_elsewhere"]
    with h5py.File(path, "r") as want, warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        got = refindex.h5py_file(refs)
        assert bool(elsewhere) == any("other files" in str(w.message) for w in said)
        try:
            return assert_same_h5(want, got, unread | set(elsewhere))
        finally:
            got.close()


def assert_same_h5(a: h5py.File, b: h5py.File, unread: set[str] = frozenset()) -> int:
    """Compare everything; returns the number of links compared.  The attributes and values of the
    objects in ``unread`` (paths) are not read: objects h5py itself cannot read without crashing."""
    names_a: list[str] = []
    names_b: list[str] = []
    a.visit_links(names_a.append)
    b.visit_links(names_b.append)
    assert names_a == names_b, "the files list other links"
    assert _attrs(a, a) == _attrs(b, b), "root attributes"
    for name in names_a:
        la, lb = _outcome(lambda: a.get(name, getlink=True)), _outcome(lambda: b.get(name, getlink=True))
        assert la[0] == lb[0] and type(la[1]) is type(lb[1]), name  # user-defined links: the same error
        la, lb = la[1], lb[1]
        if isinstance(la, h5py.SoftLink):
            assert la.path == lb.path, name
            continue
        if isinstance(la, h5py.ExternalLink):
            assert (la.filename, la.path) == (lb.filename, lb.path), name
            continue
        oa, ob = _outcome(lambda: a[name]), _outcome(lambda: b[name])
        assert (oa[0], type(oa[1]).__name__) == (ob[0], type(ob[1]).__name__), name
        if oa[0] != "ok":
            continue
        oa, ob = oa[1], ob[1]
        if "/" + name in unread:
            continue
        assert _attrs(oa, a) == _attrs(ob, b), f"{name}: attributes"
        if isinstance(oa, h5py.Dataset):
            assert (oa.shape, oa.dtype, oa.chunks, oa.compression) == (ob.shape, ob.dtype, ob.chunks, ob.compression), name
            for sel in _windows(oa):
                va = _outcome(lambda: canon(oa[sel], a))
                vb = _outcome(lambda: canon(ob[sel], b))
                assert va == vb, f"{name}{sel}: values"
    return len(names_a)
