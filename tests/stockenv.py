"""Read indexes the way a reader without refindex does: zarr, fsspec, numcodecs, imagecodecs.

``StockReader()`` starts this file as a fresh interpreter.  Before zarr loads any codec,
refindex and kerchunk become unimportable there and the ``numcodecs.codecs`` entry
points they install are dropped, so the process has exactly what a colleague's
notebook, a Dask worker image or a read-only service has: numcodecs' own codecs and
imagecodecs' (registered with ``imagecodecs.numcodecs.register_codecs()``, as its
documentation tells readers to).

The test process asks it to open indexes and read selections (pickled requests over a
pipe) and compares the answers with h5py: the values compared are the ones the stock
reader decoded.  :class:`StockGroup` / :class:`StockArray` give those answers the small
part of zarr's Group/Array interface ``refindex.verify(..., group=)`` uses.

Indexes in zarr format 3 are opened with ``zarr_format=3`` after
``imagecodecs.zarr.register_codecs()`` (imagecodecs' zarr v3 codecs have no entry points
either; the ``imagecodecs-zarr`` package would declare them): the reader's step for v3.
"""

from __future__ import annotations

import importlib.abc
import os
import pickle
import struct
import subprocess
import sys
from typing import Any

BLOCKED = ("refindex", "kerchunk")


# ---------------------------------------------------------------------- the stock process
class _NotInstalled(importlib.abc.MetaPathFinder):
    """Makes the packages a stock reader does not have unimportable."""

    def find_spec(self, name, path=None, target=None):  # noqa: ARG002
        if name.split(".", 1)[0] in BLOCKED:
            raise ImportError(f"No module named {name!r} (not installed in this environment)")
        return None


def _hide_entry_points() -> None:
    """Entry points of blocked packages vanish (zarr finds its v3 codecs through ``zarr.codecs`` ones):
    as if those packages were not installed, not installed and broken."""
    import importlib.metadata as md

    real = md.entry_points

    def entry_points(**params):
        found = real(**params)
        keep = [ep for ep in found if ep.value.split(":", 1)[0].split(".", 1)[0] not in BLOCKED]
        return md.EntryPoints(keep)

    md.entry_points = entry_points


def _stock_codecs() -> None:
    """Forget codecs of blocked packages; register imagecodecs' codecs as a reader would (v2 and v3)."""
    import numcodecs.registry as reg

    for name, ep in list(reg.entries.items()):
        if ep.value.split(":", 1)[0].split(".", 1)[0] in BLOCKED:
            del reg.entries[name]
    import imagecodecs.numcodecs
    import imagecodecs.zarr

    imagecodecs.numcodecs.register_codecs()
    imagecodecs.zarr.register_codecs(verbose=False)


def _reason(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:500]


def zarr_format_of_file(index: str) -> int:
    """3 for a JSON index holding a root ``zarr.json``, else 2."""
    import json

    with open(index) as fh:
        return 3 if "zarr.json" in json.load(fh).get("refs", {}) else 2


class _Server:
    def __init__(self) -> None:
        self.stores: dict[str, Any] = {}
        self.formats: dict[str, int] = {}

    def fmt(self, index: str) -> int:
        if index not in self.formats:
            self.formats = {index: zarr_format_of_file(index)}
        return self.formats[index]

    def store(self, index: str) -> Any:
        import fsspec
        import zarr

        st = os.stat(index)
        key = f"{index}:{st.st_mtime_ns}:{st.st_size}"  # an index rewritten in place is read again
        if key not in self.stores:
            fs = fsspec.filesystem("reference", fo=index, asynchronous=True, skip_instance_cache=True)
            self.stores = {key: zarr.storage.FsspecStore(fs, read_only=True, path="")}
            self.formats = {}
        return self.stores[key]

    def open(self, index: str, consolidated: bool = True) -> dict:
        """Open the index as a group the default way; list what zarr lists."""
        import zarr

        root = zarr.open_group(self.store(index), mode="r", zarr_format=self.fmt(index),
                               use_consolidated=None if consolidated else False)
        return {"arrays": sorted(p for p, _ in root.arrays()), "groups": sorted(p for p, _ in root.groups())}

    def group(self, index: str, path: str) -> dict:
        import zarr

        g = zarr.open_group(self.store(index), path=path, mode="r", zarr_format=self.fmt(index),
                            use_consolidated=False)
        return {"attrs": dict(g.attrs)}

    def array(self, index: str, path: str) -> dict:
        import zarr

        a = zarr.open_array(self.store(index), path=path, mode="r", zarr_format=self.fmt(index))
        return {"shape": tuple(a.shape), "attrs": dict(a.attrs), "dtype": str(a.dtype)}

    def read(self, index: str, path: str, sel: Any) -> Any:
        import numpy as np
        import zarr

        a = zarr.open_array(self.store(index), path=path, mode="r", zarr_format=self.fmt(index))
        value = np.asarray(a[sel])
        return value.astype(object) if value.dtype.kind == "T" else value

    def xarray(self, index: str, group: str) -> dict:
        """xarray (default decoding) over the index's ``group``: each variable's dims and values."""
        import numpy as np
        import xarray as xr

        ds = xr.open_dataset(self.store(index), engine="zarr", zarr_format=self.fmt(index), consolidated=False,
                             group=group or None)
        return {name: (v.dims, np.asarray(v.values)) for name, v in ds.variables.items()}

def _serve() -> None:
    sys.meta_path.insert(0, _NotInstalled())
    _hide_entry_points()
    _stock_codecs()
    server = _Server()
    rd, wr = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the answer pipe
    while True:
        head = rd.read(8)
        if len(head) < 8:
            return
        op, args = pickle.loads(rd.read(struct.unpack("<Q", head)[0]))
        try:
            answer = ("ok", getattr(server, op)(*args))
        except Exception as e:  # noqa: BLE001 - the answer is the finding
            answer = ("error", _reason(e))
        body = pickle.dumps(answer, protocol=5)
        wr.write(struct.pack("<Q", len(body)) + body)
        wr.flush()


# ---------------------------------------------------------------------- the test side
class StockError(Exception):
    """What the stock reader raised, as text."""


class StockReader:
    """A stock-environment interpreter answering open/read requests."""

    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HDF5_PLUGIN_PATH")}
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=os.path.dirname(os.path.abspath(__file__)))

    def ask(self, op: str, *args: Any) -> Any:
        body = pickle.dumps((op, args))
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(struct.pack("<Q", len(body)) + body)
        self.proc.stdin.flush()
        head = self.proc.stdout.read(8)
        if len(head) < 8:
            raise RuntimeError(f"the stock reader died (exit code {self.proc.wait()})")
        status, value = pickle.loads(self.proc.stdout.read(struct.unpack("<Q", head)[0]))
        if status != "ok":
            raise StockError(value)
        return value

    def can_import(self, module: str) -> bool:
        return self.ask("importable", module)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def __enter__(self) -> "StockReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class StockArray:
    """One array as the stock reader sees it (shape, attributes, values of any selection)."""

    def __init__(self, reader: StockReader, index: str, path: str) -> None:
        self.reader, self.index, self.path = reader, index, path
        meta = reader.ask("array", index, path)
        self.shape, self.attrs = meta["shape"], meta["attrs"]
        self.ndim = len(self.shape)

    def __getitem__(self, sel: Any) -> Any:
        return self.reader.ask("read", self.index, self.path, sel)


class StockGroup:
    """The part of zarr's Group that ``refindex.verify(..., group=)`` walks: attributes from the
    stock reader, sub-groups from the index's keys (zarr would parse every child to list them)."""

    def __init__(self, reader: StockReader, index: str, path: str = "", groups: list[str] | None = None,
                 only: set[str] | None = None) -> None:
        """``only``: the array paths (no leading "/") to present; others are absent (verify: "missing")."""
        self.reader, self.index, self.path, self.only = reader, index, path, only
        if groups is None:
            import json

            with open(index) as fh:
                keys = json.load(fh)["refs"]
            groups = sorted(k[: -len("/.zgroup")] for k in keys if k.endswith("/.zgroup"))
            groups += sorted(k[: -len("/zarr.json")] for k, v in keys.items() if k.endswith("/zarr.json")
                             and json.loads(v).get("node_type") == "group")
        self.all_groups = groups
        self.attrs = reader.ask("group", index, path)["attrs"]

    def __getitem__(self, key: str) -> StockArray:
        full = f"{self.path}/{key}".strip("/")
        if self.only is not None and full not in self.only:
            raise KeyError(key)
        try:
            return StockArray(self.reader, self.index, full)
        except StockError as e:
            if "NodeNotFound" in str(e) or "ArrayNotFound" in str(e) or "not found" in str(e).lower():
                raise KeyError(key) from e
            raise

    def groups(self):
        prefix = f"{self.path}/" if self.path else ""
        for g in self.all_groups:
            if g.startswith(prefix) and "/" not in g[len(prefix):]:
                yield g[len(prefix):], StockGroup(self.reader, self.index, g, self.all_groups, self.only)


def stock_verify(reader: StockReader, h5: Any, index: Any) -> dict[str, str]:
    """``refindex.verify`` of ``index`` against ``h5`` with the values the stock reader decoded:
    dataset path -> status (with its detail)."""
    import warnings

    import refindex

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = refindex.verify(str(h5), str(index), group=StockGroup(reader, str(index)))
    return {r.path.strip("/"): r.status + (f": {r.detail}" if r.detail else "") for r in report.results}


def _importable(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


_Server.importable = staticmethod(_importable)  # type: ignore[attr-defined]

if __name__ == "__main__":
    _serve()
