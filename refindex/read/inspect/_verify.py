"""Compare what zarr reads through an index with what h5py reads from the file.

Every dataset name reachable in the HDF5 file is checked: exact, different,
unreadable (through the index), missing (from the index), skipped (recorded as
unsupported at scan time) or h5py-unreadable (h5py itself cannot decode it, so
there is nothing to compare against).
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Iterator

import h5py
import numpy as np

from ...codecs import jsonable
from ...checks.compare import object_key, records_equal, values_of
from ...errors import RefindexError
from ...source import open_source
from ..index._load import load_refs
from ..zarr_store._open import ReadOptions, check_index, declared_of, index_location, store_of

try:
    import hdf5plugin  # noqa: F401  (expected values need every filter h5py can have)
except ImportError:  # pragma: no cover
    pass

BLOCK_BYTES = 64 << 20
HUGE_BYTES = 1 << 30  # larger datasets are compared chunk by chunk

STATUSES = ("exact", "different", "unreadable", "missing", "skipped", "h5py-unreadable")


@dataclass
class DatasetResult:
    path: str
    status: str
    detail: str = ""


@dataclass
class VerifyReport:
    """What :func:`verify` found: one result per dataset name of ``file`` (``exact``, ``different``,
    ``unreadable``, ``missing``, ``skipped`` or ``h5py-unreadable``); ``ok`` when none differs, none is
    unreadable and none is missing.  ``summary()`` is one line of counts; a notebook shows a table."""

    file: str
    results: list[DatasetResult] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def ok(self) -> bool:
        """True when nothing differs and nothing is unreadable or missing."""
        return all(r.status in ("exact", "skipped", "h5py-unreadable") for r in self.results)

    def problems(self) -> list[DatasetResult]:
        return [r for r in self.results if r.status not in ("exact",)]

    def summary(self) -> str:
        counts = ", ".join(f"{self.count(s)} {s}" for s in STATUSES if self.count(s))
        return f"{self.file}: {len(self.results)} datasets: {counts or 'none'}"

    def _repr_html_(self) -> str:
        """In a notebook: the verdict, the counts, and every dataset that is not exact."""
        from ...feedback.display import table, verdict

        counts = ", ".join(f"{self.count(s):,} {s}" for s in STATUSES if self.count(s)) or "no datasets"
        title = verdict(self.ok, f"verify {self.file}: {counts}")
        rows = [(r.path, r.status, r.detail) for r in self.problems()]
        return table(["dataset", "status", "detail"], rows, title=title) if rows else f"<p>{title}</p>"



def dataset_names(f: h5py.File) -> Iterator[tuple[str, h5py.Dataset, str]]:
    """(path, dataset, how) for every name that leads to a dataset: hard links, then soft links."""
    seen_groups = {object_key(f)}
    stack: list[tuple[str, h5py.Group]] = [("/", f)]
    while stack:
        path, g = stack.pop()
        for name in sorted(g.keys()):
            child = posixpath.join(path, name)
            info = g.id.links.get_info(name.encode("utf-8"))
            if info.type not in (h5py.h5l.TYPE_HARD, h5py.h5l.TYPE_SOFT):
                continue
            try:
                obj = g[name]
            except Exception:
                continue  # dangling soft link: no data to compare
            how = "hard" if info.type == h5py.h5l.TYPE_HARD else "soft"
            if isinstance(obj, h5py.Dataset):
                yield child, obj, how
            elif isinstance(obj, h5py.Group) and how == "hard":
                key = object_key(obj)
                if key not in seen_groups:
                    seen_groups.add(key)
                    stack.append((child, obj))


def _text(v: Any) -> str:
    if isinstance(v, (bytes, np.bytes_)):
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            return bytes(v).decode("latin-1")
    return str(v)


class _Comparer:
    def __init__(self, f: h5py.File):
        self.f = f

    def ref_equal(self, h_ref, z_text: Any) -> bool:
        z = json.loads(z_text) if isinstance(z_text, str) and z_text[:1] in "{n" else z_text
        if isinstance(z, str) and z.startswith("/"):  # hdmf-zarr's v3 convention: the target path
            z = {"path": z}
        if not h_ref:
            return z is None
        if not isinstance(z, dict) or not z.get("path"):
            return False
        try:
            same = object_key(self.f[h_ref]) == object_key(self.f[z["path"]])
        except Exception:
            return False
        if isinstance(h_ref, h5py.RegionReference):
            return same and "region" in z
        return same

    def values_equal(self, dt: np.dtype, h: np.ndarray, z: np.ndarray, attrs: dict) -> bool:
        if h.shape != z.shape and not (z.dtype.names and not h.dtype.names):
            return False
        ref = h5py.check_ref_dtype(dt)
        if ref is not None:
            return all(self.ref_equal(a, b) for a, b in zip(h.reshape(-1), z.reshape(-1)))
        s = h5py.check_string_dtype(dt)
        if s is not None and (s.length is None or z.dtype.kind in "OTU"):
            # (fixed-length text the hdmf conventions state as text: the same text)
            return all(_text(a) == _text(b) if not isinstance(b, bytes) else bytes(a) == b
                       for a, b in zip(h.reshape(-1), z.reshape(-1)))
        if h5py.check_vlen_dtype(dt) is not None:
            return all(json.loads(b) == _plain(a) for a, b in zip(h.reshape(-1), z.reshape(-1)))
        if dt.names is not None and "refindex_fields" in attrs:
            encs = attrs["refindex_fields"]
            for name in dt.names:
                sub = dt.fields[name][0]
                enc = encs.get(name)
                hf, zf = h[name], z[name]
                if enc in ("json-ref", "path-ref"):
                    ok = all(self.ref_equal(a, str(b)) for a, b in zip(hf.reshape(-1), zf.reshape(-1)))
                elif enc == "utf8":
                    ok = all(_text(a) == str(b) for a, b in zip(hf.reshape(-1), zf.reshape(-1)))
                elif enc == "json":
                    recs = hf.reshape((h.size,) + hf.shape[h.ndim:])
                    ok = all(json.loads(str(b)) == _plain(a) for a, b in zip(recs, zf.reshape(-1)))
                else:
                    ok = self.values_equal(sub, hf, zf, {})
                if not ok:
                    return False
            return True
        return records_equal(h, z)


def _plain(v: Any) -> Any:
    return json.loads(json.dumps(jsonable(v), allow_nan=True))


def compare_dataset(cmp: _Comparer, d: h5py.Dataset, z, block_bytes: int = BLOCK_BYTES,
                    notes: dict[str, Any] | None = None) -> tuple[str, str]:
    """``d`` against the zarr array ``z``; ``notes``: refindex's attributes of it a plain index keeps in its provenance."""
    attrs = dict(z.attrs) | dict(notes or {})
    dt = d.dtype
    if d.shape is None:
        return _compare_null(z)
    raw_like = h5py.check_vlen_dtype(dt) is None and h5py.check_ref_dtype(dt) is None and "refindex_fields" not in attrs
    expected_shape = tuple(d.shape) + (dt.subdtype[1] if dt.subdtype is not None else ())
    if expected_shape == (1,) and z.shape == () and h5py.check_string_dtype(dt) is not None:
        # a one-element text the hdmf conventions state as a scalar (cached specifications)
        return _compare_selection(cmp, d, z, attrs, (), unpack=True) or ("exact", "")
    if tuple(z.shape) != expected_shape:
        return "different", f"shape {tuple(z.shape)} != h5py {expected_shape}"
    total = int(np.prod(expected_shape, dtype=np.float64)) * dt.itemsize if d.shape else dt.itemsize
    if raw_like and d.shape and total > HUGE_BYTES:
        return _compare_sparse(cmp, d, z, attrs)
    rows = d.shape[0] if d.shape else 1
    row_bytes = max(1, (d.dtype.itemsize * int(np.prod(expected_shape[1:], dtype=np.int64))) if d.shape else 1)
    step = max(1, block_bytes // row_bytes) if raw_like and d.shape else max(rows, 1)
    for start in range(0, max(rows, 1), step):
        sel = (slice(start, start + step),) if d.shape else ()
        status = _compare_selection(cmp, d, z, attrs, sel)
        if status is not None:
            return status
    return "exact", ""


def _compare_null(z) -> tuple[str, str]:
    """A null dataspace (h5py: ``Empty``, no element) equals an array that reads as no element of its type."""
    if tuple(z.shape) != (0,):
        return "different", f"null dataspace read as shape {tuple(z.shape)}, not an empty array of shape (0,)"
    try:
        zv = np.asarray(z[...])
    except Exception as e:
        return "unreadable", f"{type(e).__name__}: {e}"
    if zv.size:
        return "different", f"null dataspace read as {zv.size} element(s)"
    return "exact", ""


def _compare_selection(cmp: "_Comparer", d: h5py.Dataset, z, attrs: dict, sel: tuple,
                       unpack: bool = False) -> tuple[str, str] | None:
    try:
        h = np.asarray(values_of(d)[sel] if sel else values_of(d)[()])
        h = h.reshape(()) if unpack else h
    except Exception as e:
        return "h5py-unreadable", f"h5py cannot read it: {e}"
    try:
        zv = np.asarray(z[sel] if sel else z[...])
        if zv.dtype.kind == "T":
            zv = zv.astype(object)
    except Exception as e:
        return "unreadable", f"{type(e).__name__}: {e}"
    if "refindex_view_dtype" in attrs:  # long doubles kept as raw bytes: the numbers they hold
        zv = zv.view(view_dtype(attrs["refindex_view_dtype"]))
    if not cmp.values_equal(d.dtype, h, zv, attrs):
        return "different", f"values differ in {sel}" if sel else "scalar value differs"
    return None


def view_dtype(attr: Any) -> np.dtype:
    """The numpy dtype a ``refindex_view_dtype`` attribute names (a dtype string, or a compound's descr)."""
    if isinstance(attr, str):
        return np.dtype(attr)
    return np.dtype([tuple(view_dtype(x) if isinstance(x, list) and i == 1 else x for i, x in enumerate(f))
                     for f in attr])


def _compare_sparse(cmp: "_Comparer", d: h5py.Dataset, z, attrs: dict) -> tuple[str, str]:
    """Datasets too large to read whole: every stored chunk, plus sample points elsewhere.

    Elements outside stored chunks are the fill value by construction in both
    readers; a few deterministic samples (corners, middle) check that they agree.
    """
    regions: list[tuple] = []
    if d.chunks is not None and d.id.get_storage_size():
        chunks = d.chunks

        def cb(info):
            regions.append(tuple(slice(o, min(o + c, n)) for o, c, n in zip(info.chunk_offset, chunks, d.shape)))

        d.id.chunk_iter(cb)
    elif d.id.get_storage_size():
        rows = d.shape[0]
        step = max(1, BLOCK_BYTES // max(1, d.dtype.itemsize * int(np.prod(d.shape[1:], dtype=np.int64))))
        regions = [(slice(i, i + step),) for i in range(0, rows, step)]
    corners = [tuple(0 for _ in d.shape), tuple(n - 1 for n in d.shape), tuple(n // 2 for n in d.shape)]
    regions += [tuple(slice(i, i + 1) for i in c) for c in corners if all(n > 0 for n in d.shape)]
    for sel in regions:
        status = _compare_selection(cmp, d, z, attrs, sel)
        if status is not None:
            return status
    return "exact", f"{len(regions)} regions compared (stored chunks and samples)"


def verify(source: Any, refs: Any, *, storage_options: dict | None = None, check_source: bool = True,
           remote_options: dict[str, Any] | None = None, remote_protocol: str | None = None,
           allowed_urls: Sequence[str] | None = None, trust: bool = False, group: Any = None) -> VerifyReport:
    """Read every dataset of ``source`` through h5py and through ``refs`` with zarr; compare.

    ``group``: compare with what another reader opened from ``refs`` (anything with the
    ``[key]`` / ``attrs`` / ``groups()`` of a zarr Group) instead of opening it here.

    ``check_source``: first refuse (``StaleIndexError``) when ``source`` no longer matches
    the size/etag/mtime the index recorded.  ``storage_options`` reach ``source``;
    ``remote_options``/``remote_protocol`` the files the index's chunks live in.
    The URLs ``refs`` names are judged first, as by :func:`refindex.open` (``allowed_urls``,
    ``trust``).
    """
    from ..zarr_store._consolidated import open_group
    from ..index._icechunk import icechunk_index

    ic = icechunk_index(refs, source_options=remote_options)
    if ic is not None:  # an Icechunk repository (or one of its groups): provenance from the commit record
        if check_source:
            from ..freshness import check_source as _check

            _check(ic.as_refs(), source=str(source), storage_options=storage_options)
        return compare_file(source, ic.as_refs(), group if group is not None else ic.zarr_group(), storage_options)

    opts = ReadOptions.of(remote_options=remote_options, remote_protocol=remote_protocol, allowed_urls=allowed_urls,
                          trust=trust, index_url=index_location(refs), check_source=False)  # (``source`` is asked)
    try:
        refs = load_refs(refs)
    except RefindexError as e:
        raise _swapped(source, refs) or e
    if check_index(refs, opts):
        opts = replace(opts, trust=True)
    if check_source:
        from ..freshness import check_source as _check

        _check(declared_of(refs, opts), source=str(source), storage_options=storage_options)
    return compare_file(source, refs, group if group is not None else open_group(store_of(refs, opts)),
                        storage_options)


def _swapped(source: Any, refs: Any) -> RefindexError | None:
    """The error for ``verify(INDEX, FILE)`` (the arguments the wrong way round), or None when they
    are not (so the error loading ``refs`` stands as it is)."""
    from ..index._load import kind_of

    try:
        kinds = ("json" if isinstance(source, dict) else kind_of(os.fspath(source)), kind_of(os.fspath(refs)))
    except (RefindexError, TypeError):
        return None
    if kinds[0] == "hdf5" or kinds[1] != "hdf5":
        return None
    return RefindexError(f"the arguments are swapped: {source} is a reference index and {refs} an HDF5 file; "
                         f"give the HDF5 file first, then its index (refindex verify {refs} {source})")


def compare_file(source: Any, refs: Any, root: Any, storage_options: dict | None) -> VerifyReport:
    """Every dataset of ``source`` (h5py) against the zarr group ``root`` read from the index ``refs``
    (whose provenance lists what was skipped or omitted)."""
    prov = _provenance(refs)
    skipped = {s["path"] for s in prov.get("skipped", []) if "attribute" not in s}
    omitted = {s["path"] for s in prov.get("omitted", [])}
    aside = prov.get("hidden_attributes") or {}
    index_path = {hdf5: index for index, hdf5 in (prov.get("renamed") or {}).items()}
    with open_source(source, storage_options) as src:
        report = VerifyReport(src.url)
        cmp = _Comparer(src.h5)
        links = _zarr_links(root, aside)
        for path, d, how in dataset_names(src.h5):
            key = index_path.get(path, path).strip("/")
            if path in skipped:
                report.results.append(DatasetResult(path, "skipped", "recorded as unsupported in the index"))
                continue
            if path in omitted:  # no data to compare (netCDF dimension without a variable)
                report.results.append(DatasetResult(path, "skipped", "omitted from the index: holds no data"))
                continue
            try:
                z = root[key]
            except KeyError:
                target = links.get(path)
                if target is None:
                    report.results.append(DatasetResult(path, "missing", "not in the index"))
                    continue
                try:
                    z = root[target.strip("/")]
                except KeyError:
                    report.results.append(DatasetResult(path, "missing", f"link target {target} not in the index"))
                    continue
            except Exception as e:
                report.results.append(DatasetResult(path, "unreadable", f"{type(e).__name__}: {e}"))
                continue
            status, detail = compare_dataset(cmp, d, z, notes=aside.get("/" + key))
            report.results.append(DatasetResult(path, status, detail))
    return report


def _provenance(refs: Any) -> dict[str, Any]:
    """An index's ``refindex`` section: a refs dict's, or a parquet folder's (in its .zmetadata)."""
    if isinstance(refs, dict):
        return refs.get("refindex") or {}
    from ..index._load import parquet_metadata

    try:
        return parquet_metadata(refs).get("refindex") or {}
    except (RefindexError, OSError, TypeError):
        return {}


def _zarr_links(root, aside: dict[str, dict[str, Any]] | None = None) -> dict[str, str]:
    """HDF5 path -> target path for every ``zarr_link`` entry (``_LINKS`` in hdmf-zarr's v3 convention;
    a plain index keeps its entries in the provenance, ``aside``)."""
    out: dict[str, str] = {}

    def visit(g, path: str) -> None:
        kept = ((aside or {}).get(path) or {}).get("zarr_link", [])
        for entry in list(g.attrs.get("zarr_link", []) or []) + list(g.attrs.get("_LINKS", []) or []) + list(kept):
            if entry.get("source", ".") == "." and entry.get("path"):
                out[posixpath.join(path, entry["name"])] = entry["path"]
        for name, sub in g.groups():
            visit(sub, posixpath.join(path, name))

    try:
        visit(root, "/")
    except Exception as e:  # pragma: no cover
        raise RefindexError(f"cannot walk the index: {e}") from e
    return out
