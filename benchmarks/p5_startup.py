"""P5: what every command pays before it does anything — interpreter start and imports.

Each command runs ``--repeat`` times in fresh processes, interleaved, wall time measured
from outside; the median is reported.  Compared: ``import h5py, fsspec`` (what any HDF5
tool over fsspec pays), ``import refindex``, ``refindex --help``, and a whole
``refindex scan`` of a small local file against an h5py walk of it in one process.
Goal (issue #12): ``import refindex`` and ``refindex --help`` within 0.1 s of
``import h5py, fsspec``.

Isolation (issue #13): ``refindex scan`` runs libhdf5 in a forked worker by default; the
same scan with ``--no-isolate``, and through the Python API's fresh-interpreter worker
(``isolate=True``, what the CLI's ``--isolate`` used to cost), show what it adds, as a
difference and a ratio of medians from the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import table, verdict  # noqa: E402

PY = sys.executable
REFINDEX = os.path.join(os.path.dirname(PY), "refindex")
WALK = ("import sys, h5py\nf = h5py.File(sys.argv[1], 'r')\n"
        "f.visititems(lambda n, o: [o.attrs[k] for k in o.attrs])")
API_ISOLATED = "import sys, refindex\nrefindex.scan_to_file(sys.argv[1], sys.argv[2], isolate=True)"
SCAN = "refindex scan of it (whole process; isolated, the default)"
PLAIN = "refindex scan --no-isolate of it"
SPAWNED = "refindex.scan_to_file(isolate=True) of it (fresh-interpreter worker)"


def _small_file(folder: str) -> str:
    import h5py
    import numpy as np

    path = os.path.join(folder, "small.h5")
    with h5py.File(path, "w") as f:
        for i in range(20):
            f.create_dataset(f"g{i}/x", data=np.arange(1000) * i, chunks=(100,), compression="gzip")
            f[f"g{i}"].attrs["note"] = f"group {i}"
    return path


def _time(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def run(repeat: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        src = _small_file(tmp)
        cases = {
            "python -c 'import h5py, fsspec'": [PY, "-c", "import h5py, fsspec"],
            "python -c 'import refindex'": [PY, "-c", "import refindex"],
            "refindex --help": [REFINDEX, "--help"],
            "h5py walk of a small file (whole process)": [PY, "-c", WALK, src],
            SCAN: [REFINDEX, "scan", src, "-o", os.path.join(tmp, "s.json"), "--no-progress"],
            PLAIN: [REFINDEX, "scan", src, "-o", os.path.join(tmp, "n.json"), "--no-progress", "--no-isolate"],
            SPAWNED: [PY, "-c", API_ISOLATED, src, os.path.join(tmp, "w.json")],
        }
        runs: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(repeat):
            for name, cmd in cases.items():
                runs[name].append(_time(cmd))
    med = {k: statistics.median(v) for k, v in runs.items()}
    base = med["python -c 'import h5py, fsspec'"]
    rows = [[k, round(v, 3), " ".join(f"{x:.2f}" for x in runs[k])] for k, v in med.items()]
    lines = [f"### P5 start-up: interpreter and imports ({repeat} fresh processes each, interleaved; median)", "",
             table(["command", "wall s", "runs"], rows), ""]
    for name in ("python -c 'import refindex'", "refindex --help"):
        extra = med[name] - base
        lines.append(f"- {name}: {extra:+.3f} s against `import h5py, fsspec` (target <= +0.1 s): "
                     f"{verdict(extra <= 0.1)}")
    lines.append(f"- refindex scan as a whole process: {med[SCAN]:.2f} s, "
                 f"{med[SCAN] / med['h5py walk of a small file (whole process)']:.2f}x an h5py walk of the same file")
    lines.append(f"- isolation's cost on this small file: forked worker (the default) {med[SCAN] - med[PLAIN]:+.3f} s, "
                 f"{med[SCAN] / med[PLAIN]:.2f}x `--no-isolate`; a fresh-interpreter worker "
                 f"{med[SPAWNED] - med[PLAIN]:+.3f} s, {med[SPAWNED] / med[PLAIN]:.2f}x")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=7)
    a = p.parse_args(argv)
    text = run(a.repeat)
    print(text)
    return text


if __name__ == "__main__":
    main()
