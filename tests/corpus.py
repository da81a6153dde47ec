"""Where the shared corpus of real HDF5 files is (it exists on our machines and in CI, never in the repo).

``REFINDEX_CORPUS`` names it; otherwise the first ``shared/corpus`` folder found above this
checkout (a clone in ``/work/x`` or a worktree in ``/work/wt/x`` both find ``/work/shared/corpus``).
Tests that need it skip with a clear reason when it is absent.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path


def _find() -> Path:
    if os.environ.get("REFINDEX_CORPUS"):
        return Path(os.environ["REFINDEX_CORPUS"])
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "shared" / "corpus"
        if (candidate / "MANIFEST.tsv").exists():
            return candidate
    return here.parents[2] / "shared" / "corpus"


CORPUS = _find()
MANIFEST = CORPUS / "MANIFEST.tsv"
MISSING = f"HDF5 corpus not found at {CORPUS} (set REFINDEX_CORPUS)"


def manifest_rows() -> list[dict[str, str]]:
    """The corpus's MANIFEST.tsv rows (empty without the corpus)."""
    if not MANIFEST.exists():
        return []
    with open(MANIFEST, newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


SAMPLE_ABOVE = 300  # arrays per file: beyond this, modules that re-check the corpus another way sample them


def sampled(names: list[str], limit: int = SAMPLE_ABOVE) -> list[str]:
    """``names`` (sorted) when there are at most ``limit``, else an evenly spaced ``limit`` of them, first
    and last included.  For the modules that check the corpus again through another route (Icechunk,
    VirtualiZarr): every array of every file is compared with h5py in test_corpus, and through
    xarray in test_xarray; files of thousands of arrays (netCDF-C's 2000-variable file) would
    otherwise take most of the suite's time re-reading them one by one."""
    names = sorted(names)
    if len(names) <= limit:
        return names
    step = (len(names) - 1) / (limit - 1)
    return [names[round(i * step)] for i in range(limit)]


WHOLE_READ_LIMIT = 256 << 20  # arrays of more bytes (unallocated giants) are compared on a few chunks ...
MANY_CHUNKS = 1000  # ... and so are arrays of more chunks (zarr decodes ~0.15 ms a chunk, 34,000 in one file)


def read_whole(shape: Sequence[int], chunks: Sequence[int], itemsize: int) -> bool:
    """Is an array small enough, in bytes and in chunks, for a module that re-checks the corpus to
    compare it whole?  (test_corpus compares every value; the others check a route's metadata,
    which is the same in every chunk.)  Python ints: giant arrays overflow int64."""
    nbytes = int(itemsize)
    for n in shape:
        nbytes *= int(n)
    return nbytes <= WHOLE_READ_LIMIT and chunk_count(shape, chunks) <= MANY_CHUNKS


def chunk_count(shape: Sequence[int], chunks: Sequence[int]) -> int:
    """How many chunks of ``chunks`` an array of ``shape`` has (Python ints: giant arrays overflow int64)."""
    count = 1
    for n, c in zip(shape, chunks):
        count *= -(-int(n) // max(1, int(c)))
    return count


def chunk_samples(shape: Sequence[int], chunks: Sequence[int], side: int = 512) -> list[tuple[slice, ...]]:
    """Selections of an array's first, middle and last chunk (at most ``side`` elements along each
    axis): what an array not read whole is compared on."""
    grid = [max(1, -(-int(n) // max(1, int(c)))) for n, c in zip(shape, chunks)]
    out = []
    for pick in (0, 0.5, 1):
        at = [min(g - 1, int((g - 1) * pick)) for g in grid]
        sel = tuple(slice(i * c, min(i * c + min(c, side), n)) for i, c, n in zip(at, chunks, shape))
        if sel not in out:
            out.append(sel)
    return out
