"""Every index refindex makes of the golden inputs (the corpus and the test-built files of
``tests/golden.py``) hashes to the digest stored in tests/data/golden_digests.json.

Moving code around must not change an index; a change of output on purpose updates the
digests (``python tests/golden.py --update``) in the same commit, saying why.
"""

from __future__ import annotations

import json

import pytest

import golden  # noqa: E402  (tests/ is on sys.path under pytest)


def test_indexes_match_the_golden_digests():
    pytest.importorskip("pynwb")
    stored = json.loads(golden.DIGESTS.read_text())
    corpus = golden.CORPUS if golden.CORPUS.is_dir() else None
    now = golden.compute_in_subprocess(corpus)
    expected = {k: v for k, v in stored.items() if corpus is not None or not k.startswith("corpus/")}
    assert sorted(now) == sorted(expected), "inputs added or missing: update the digests on purpose"
    changed = sorted(k for k in expected if now[k] != expected[k])
    assert not changed, f"{len(changed)} index(es) changed: {changed[:10]}"
