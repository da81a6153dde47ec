"""Long mutation-fuzz run of the scanner over the shared corpus (``make fuzz``).

Prints runs, outcomes (exact / errors by class), crashes and hangs caught by the
isolation, findings (silently different data, non-RefindexError exceptions, partial
output) and the duration.  Exits non-zero when there are findings.

    python benchmarks/fuzz_long.py [--seconds 150] [--seed 1] [--files 80] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import sys
import tempfile

from refindex.testing import fuzz


def main() -> int:
    # every native chunk table is compared with libhdf5's: a difference is a finding (refindex.scanner._listing)
    os.environ.setdefault("REFINDEX_CHECK_CHUNK_INDEX", "1")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=150.0, help="time budget (default 150)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--files", type=int, default=80, help="corpus files to mutate (smallest first, spread)")
    p.add_argument("--max-size", type=int, default=256 << 10, help="largest corpus file to use, bytes")
    p.add_argument("--timeout", type=float, default=10.0, help="per-case time limit, s")
    p.add_argument("--corpus", default=os.environ.get("REFINDEX_CORPUS", str(Path(__file__).resolve().parents[2] / "shared" / "corpus")))
    p.add_argument("--keep", help="save mutated inputs of findings/crashes/hangs here")
    a = p.parse_args()
    if not os.path.exists(os.path.join(a.corpus, "MANIFEST.tsv")):
        print(f"no corpus at {a.corpus} (MANIFEST.tsv missing)", file=sys.stderr)
        return 2
    files = fuzz.corpus_files(a.corpus, max_size=a.max_size, limit=a.files)
    with tempfile.TemporaryDirectory(prefix="refindex-fuzz-") as work:
        report = fuzz.run(files, work, seed=a.seed, per_file=10_000, budget=a.seconds, timeout=a.timeout,
                          keep=a.keep)
    errors = sum(v for k, v in report.outcomes.items() if k.startswith("error:"))
    print(f"fuzz: seed {a.seed}, {len(files)} files <= {a.max_size} bytes")
    print(report.summary())
    print(f"  successes (exact) {report.outcomes.get('exact', 0)}, clean RefindexErrors {errors}, "
          f"{report.runs / max(report.seconds, 1e-9):.1f} runs/s")
    for line in report.notes:
        print("caught:", line)
    for line in report.findings:
        print("FINDING:", line)
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
