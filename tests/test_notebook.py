"""What a notebook shows: reports as HTML tables, progress as a Jupyter widget, and logs without redraws.

One small notebook is executed in a real Jupyter kernel (nbclient + ipykernel): its outputs are what
JupyterLab would render.  Outside a notebook, progress goes to a terminal as a bar and to a log as
plain lines (never carriage returns).
"""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

from refindex.feedback.progress import LineProgress, in_notebook, progress_bar

WIDGET = "application/vnd.jupyter.widget-view+json"


def _write(path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.random.default_rng(1).normal(size=(200, 300)).astype("f4"),
                         chunks=(50, 100), compression="gzip")
        f.create_dataset("labels", data=["a", "b"], dtype=h5py.string_dtype())


def _cell(src: str):
    import nbformat

    return nbformat.v4.new_code_cell(textwrap.dedent(src))


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook, run in a fresh kernel in a folder with one HDF5 file; its cells' outputs."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    folder = tmp_path_factory.mktemp("notebook")
    _write(folder / "data.h5")
    nb = nbformat.v4.new_notebook(cells=[
        _cell("""
            import refindex
            refs = refindex.scan("data.h5", progress=False)
            refindex.verify("data.h5", refs)
        """),
        _cell("refindex.info(refs)"),
        _cell("""
            root = refindex.open(refs)
            root["data"][:60, :10]
            root.store.stats
        """),
        _cell("""
            report = refindex.run_batch(["data.h5", "missing.h5"], output="indexes", workers=0, progress=False)
            report
        """),
        _cell("""
            from refindex.feedback.progress import in_notebook
            print(in_notebook())
            refs = refindex.scan("data.h5", progress=True)
        """),
    ])
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(folder)}})
    client.execute()
    return [cell.outputs for cell in nb.cells]


def _html(outputs) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in outputs if o.get("output_type") == "execute_result")


def test_reports_render_as_html_tables_in_a_notebook(executed):
    verify, info, stats, batch = (_html(executed[i]) for i in range(4))
    assert "✔ verify" in verify and "2 exact" in verify and "<table" not in verify  # nothing differs: one line
    assert "<table>" in info and "chunks referenced" in info and "12" in info and "zlib (numcodecs)" in info
    assert "<table>" in stats and "requests" in stats and "bytes fetched" in stats
    assert "✘" in batch and "1 failed" in batch  # the missing file fails, and comes first
    assert batch.index("missing.h5") < batch.index("data.h5.refs.json") and "indexed" in batch


def test_progress_is_a_widget_in_a_notebook(executed):
    outputs = executed[4]
    assert any(o.get("text", "").strip() == "True" for o in outputs if o.get("output_type") == "stream")
    widgets = [o for o in outputs if WIDGET in o.get("data", {})]
    assert widgets, f"no progress widget among {[o.get('output_type') for o in outputs]}"
    assert not any("\r" in o.get("text", "") for o in outputs if o.get("output_type") == "stream")


def test_progress_outside_a_notebook():
    assert not in_notebook()
    assert progress_bar(10, desc="x", unit="file", setting="auto") is None  # auto: notebooks only
    assert progress_bar(10, desc="x", unit="file", setting=False) is None
    log = io.StringIO()
    bar = progress_bar(3, desc="refindex batch", unit="file", setting=True, file=log, interval=3600)
    assert isinstance(bar, LineProgress)
    for _ in range(3):
        bar.update(1)
    bar.set_postfix(failed=1)
    bar.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert lines[0].startswith("refindex batch: 1/3 files") and lines[-1].startswith("refindex batch: 3/3 files")
    assert "failed=1" in lines[-1] and len(lines) == 2  # the first update, then the end: none in between


def test_batch_writes_plain_lines_into_a_log(tmp_path):
    _write(tmp_path / "a.h5")
    proc = subprocess.run([sys.executable, "-m", "refindex.cli", "batch", str(tmp_path / "*.h5"), "--workers", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr and "\x1b[" not in proc.stderr
    assert "refindex batch (0 up to date): 1/1 files" in proc.stderr and "1 indexed" in proc.stderr
