"""The scan behind the VirtualiZarr parser: a file's zarr v3 hierarchy, as a plain v3 index holds it.

No VirtualiZarr here, so an isolated worker (``isolate=True``) runs this without loading
xarray or VirtualiZarr; what it returns (documents, numpy chunk tables, inline bytes) pickles.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .. import conventions, formats, pipeline
from ..errors import NotForXarray
from ..options import ScanOptions
from ..formats.v3 import Hierarchy

NWB_HINT = ("an HDMF/NWB file (object references, links and ragged tables that xarray cannot model): index it "
            "with refindex.scan_to_file(path, out, zarr_format=3) and read it with hdmf-zarr's NWBZarrIO "
            "(or refindex.open_nwb), or pass convention='plain' to get its datasets as plain arrays")


@dataclass
class Scan:
    """What a parser needs from one scan: the v3 hierarchy, the URL its references name, what was left out."""

    hierarchy: Hierarchy
    url: str  # the scanned file as references name it (refindex's form: a plain path when local)
    skipped: list[dict[str, str]]
    convention: str


def as_uri(url: str) -> str:
    """A location as the absolute URI VirtualiZarr's manifests and registries expect (``file:///...``)."""
    if "://" in url:
        return url
    return "file://" + os.path.abspath(url)


def scan_hierarchy(source: str, options: ScanOptions) -> Scan:
    """Scan ``source`` in this process into the hierarchy a plain zarr v3 index of it would hold.

    ``options.convention`` ``"auto"`` refuses HDMF/NWB files (see :data:`NWB_HINT`).
    """
    options = options.but(zarr_format=3)
    scanned = pipeline.scan_source(source, options)
    chosen = conventions.detect(scanned.tree) if options.convention == "auto" else options.convention
    if chosen == "hdmf" and options.convention == "auto":
        raise NotForXarray(f"not served to xarray: {NWB_HINT}", file=scanned.label)
    tree = pipeline.prepare_tree(scanned, options.but(convention=chosen))
    return Scan(formats.v3.hierarchy(tree), tree.url, list(tree.skipped), chosen)


def scan_hierarchy_job(source: str, options: ScanOptions) -> Scan:
    """:func:`scan_hierarchy` as an isolated worker's job (libhdf5 crashes and hangs stay there)."""
    return scan_hierarchy(source, options.but(isolate=False))


def scan(source: str, options: ScanOptions) -> Scan:
    """:func:`scan_hierarchy`, in a worker process when ``options.isolate`` (killed after ``options.timeout``)."""
    if not options.isolate:
        return scan_hierarchy(source, options)
    from ..isolation.worker import Worker
    from ..options import time_limit_of

    with Worker() as worker:
        return worker.run(scan_hierarchy_job, {"source": source, "options": options},
                          timeout=options.timeout or time_limit_of(source))
