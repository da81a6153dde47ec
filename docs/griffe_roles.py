"""A griffe extension for ``make docs`` (mkdocs.yml): refindex's docstrings name other objects with
Sphinx roles (``:func:`~refindex.open```), which Markdown would show as they are written; on the API
page they become code spans (``refindex.open``; ``~`` keeps the last part, as Sphinx does)."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")


def plain(text: str) -> str:
    """``text`` with every Sphinx role written as a Markdown code span."""
    return ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text)


class SphinxRolesAsCode(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
