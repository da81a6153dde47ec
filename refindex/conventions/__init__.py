"""Layout conventions applied to a scanned :class:`~refindex.model.Tree` before it is written.

``plain`` (:mod:`._plain`): every HDF5 name that leads to data stays readable.  ``hdmf``
(:mod:`._hdmf`): hdmf-zarr's storage convention, for HDMF/NWB files.  A convention is a
module beside these, applied by :func:`apply`.
"""

from __future__ import annotations

from ..model import Tree
from ..options import Convention
from ._hdmf import apply_hdmf
from ._plain import apply_plain

__all__ = ["Convention", "apply", "detect"]


def detect(tree: Tree) -> str:
    """``"hdmf"`` for files written by HDMF (NWB), else ``"plain"``."""
    root = tree.groups.get("/")
    attrs = root.attrs if root else {}
    if ".specloc" in attrs or ("namespace" in attrs and "neurodata_type" in attrs):
        return "hdmf"
    return "plain"


def apply(tree: Tree, convention: Convention = "auto") -> str:
    """Rewrite ``tree`` in place for ``convention``; returns the convention applied."""
    chosen = detect(tree) if convention == "auto" else convention
    if chosen == "hdmf":
        apply_hdmf(tree)
    elif chosen == "plain":
        apply_plain(tree)
    else:
        raise ValueError(f"unknown convention {convention!r}")
    tree.provenance["convention"] = chosen
    return chosen
