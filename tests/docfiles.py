"""The files every documentation page's examples run against (see tests/test_docs.py): the ones
``refindex demo`` writes (:mod:`refindex.demo`), so README's quick starts run as written in the
folder ``make demo`` leaves.

``build(folder)`` writes session.nwb, climate.nc, climate2.nc and data.h5 (described in
refindex/demo.py), once per test session.
"""

from __future__ import annotations

from refindex.demo import DAYS_PER_FILE, EXAMPLE_FILES as FILES, write_examples as build  # noqa: F401
