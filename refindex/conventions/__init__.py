"""Layout conventions applied to a scanned :class:`~refindex.model.Tree` before it is written.

``plain`` (:mod:`._plain`): every HDF5 name that leads to data stays readable.  ``hdmf``
(:mod:`._hdmf`): hdmf-zarr's storage convention, for HDMF/NWB files.  A convention is a
module beside these, applied by :func:`apply`.  zarr v3 indexes have their own two
(:func:`apply_v3`): hdmf-zarr 0.14's v3 convention (:mod:`._hdmf3`) and the plain layout
with xarray's v3 encodings (:mod:`._plain3`).
"""

from __future__ import annotations

from ..model import Tree, is_hdmf_root
from ..options import Convention
from ._hdmf import apply_hdmf
from ._hdmf3 import apply_hdmf3
from ._plain import apply_plain
from ._ncview import hidden_attributes
from ._plain3 import KEPT_FILL_ATTR, apply_plain3

__all__ = ["KEPT_FILL_ATTR", "Convention", "apply", "apply_v3", "detect", "hidden_attributes"]


def detect(tree: Tree) -> str:
    """``"hdmf"`` for files written by HDMF (NWB), else ``"plain"``."""
    root = tree.groups.get("/")
    return "hdmf" if is_hdmf_root(root.attrs if root else {}) else "plain"


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


def apply_v3(tree: Tree, convention: Convention = "auto") -> tuple[str, list[tuple[str, str]]]:
    """Rewrite ``tree`` in place for a zarr v3 index; returns (the convention applied, the
    ``(path, reason)`` of every array that has no form in it: the caller's policy decides)."""
    chosen = detect(tree) if convention == "auto" else convention
    if chosen == "hdmf":
        refused = apply_hdmf3(tree)
    elif chosen == "plain":
        refused = apply_plain3(tree)
    else:
        raise ValueError(f"unknown convention {convention!r}")
    tree.provenance["convention"] = chosen
    return chosen, refused
