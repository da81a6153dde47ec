"""Where the shared corpus of real HDF5 files is (it exists on our machines and in CI, never in the repo).

``REFINDEX_CORPUS`` names it; otherwise the first ``shared/corpus`` folder found above this
checkout (a clone in ``/work/x`` or a worktree in ``/work/wt/x`` both find ``/work/shared/corpus``).
Tests that need it skip with a clear reason when it is absent.
"""

from __future__ import annotations

import csv
import os
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
