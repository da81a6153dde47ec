"""What issue 21's fill representation costs: v2 JSON index bytes with and without the fill chunks.

A plain v2 index states ``fill_value`` as xarray reads it (the ``_FillValue`` attribute, else null)
and writes the chunks the file never wrote as chunks of HDF5's fill value where zarr would
otherwise read them differently (:mod:`refindex.conventions._fills`).  This scans every corpus
file (and the builder file of never-written chunks) once, and writes its v2 index both ways:
as refindex does, and with the fill step left out (``fill_value`` as before: HDF5's, no extra
chunks).  It reports the bytes and keys the fill chunks add, per file and in total.

    python benchmarks/xarray_fill_cost.py [--top 10]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import warnings
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))


def sizes(path: str) -> tuple[int, int, int, int, list[str]]:
    """(bytes with fills, bytes without, keys with, keys without, arrays left masked) of ``path``'s v2 index."""
    from refindex import formats, pipeline
    from refindex.conventions import _fills
    from refindex.options import ScanOptions

    opts = ScanOptions(on_unsupported="skip")
    scanned = pipeline.scan_source(path, opts)
    with_fills = formats.to_refs(pipeline.prepare_tree(copy.deepcopy(scanned), opts))
    real = _fills.xarray_fill_values
    _fills.xarray_fill_values = lambda tree: None
    try:
        import refindex.conventions._plain as plain

        plain.xarray_fill_values = _fills.xarray_fill_values
        without = formats.to_refs(pipeline.prepare_tree(scanned, opts))
    finally:
        _fills.xarray_fill_values = real
        plain.xarray_fill_values = real
    text = [json.dumps(r, allow_nan=True, separators=(",", ":")) for r in (with_fills, without)]
    return (len(text[0]), len(text[1]), len(with_fills["refs"]), len(without["refs"]),
            with_fills.get("refindex", {}).get("fill_masked", []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from corpus import CORPUS, manifest_rows

    from refindex.testing.builders import write_fill_values

    files = [str(CORPUS / r["relpath"]) for r in manifest_rows() if not r["notes"].startswith("NOT HDF5")]
    tmp = tempfile.mkdtemp()
    builder = os.path.join(tmp, "fills.h5")
    write_fill_values(builder)
    rows: list[tuple[str, Any]] = []
    for path in files + [builder]:
        try:
            rows.append((path, sizes(path)))
        except Exception as e:  # noqa: BLE001 - a file no index can be made of
            print(f"  {os.path.basename(path)}: {type(e).__name__}: {e}"[:160])
    total_with = sum(r[0] for _, r in rows if _ != builder)
    total_without = sum(r[1] for _, r in rows if _ != builder)
    added = [(p, r[0] - r[1], r[2] - r[3]) for p, r in rows if r[0] != r[1] or r[2] != r[3]]
    chunked = [(p, b, k) for p, b, k in added if k and p != builder]
    print(f"{len(rows) - 1} corpus files: v2 JSON {total_without:,} -> {total_with:,} bytes "
          f"({total_with - total_without:+,}, {100 * (total_with - total_without) / total_without:+.3f} %); "
          f"{len(chunked)} files gain fill chunks ({sum(k for _, _, k in chunked):,} chunks, "
          f"{sum(b for _, b, _ in chunked):+,} bytes); the rest is fill_value text (0 -> null)")
    for p, b, k in sorted(added, key=lambda x: -x[1])[:args.top]:
        print(f"  {os.path.relpath(p, str(CORPUS)) if p != builder else 'builder fills.h5'}: "
              f"{b:+,} bytes, {k:+,} keys")
    masked = [(p, r[4]) for p, r in rows if r[4]]
    print(f"arrays left masked (fill value kept HDF5's): {masked or 'none'}")


if __name__ == "__main__":
    main()
