"""The rules refindex's layout keeps (issue #12), checked on its own syntax trees.

The data flows one way: source -> scanner -> model (+ codecs, conventions) -> formats ->
read side -> batch / cli, with one composition root (``refindex.pipeline``).  See
tests/architecture.py for how imports are counted (function-level ones included).
"""

from __future__ import annotations

import ast
import subprocess
import sys

import architecture  # noqa: E402  (tests/ is on sys.path under pytest)

LOWER = ("refindex.source", "refindex.scanner", "refindex.codecs", "refindex.conventions", "refindex.formats")
HIGHER = ("refindex.pipeline", "refindex.api", "refindex.read", "refindex.batch", "refindex.cli",
          "refindex.virtualizarr", "refindex.testing", "refindex.demo")
# The ground floor: what every layer may use, and which uses nothing above it (issue #46)
GROUND = ("refindex.errors", "refindex.options", "refindex.urls", "refindex.lazy", "refindex.model",
          "refindex.isolation", "refindex.feedback", "refindex.checks")
# The read side: the index side (a trusted, fresh index) and the consumers of an index
INDEX_SIDE = ("refindex.read.index", "refindex.read.freshness")
CONSUMERS = ("refindex.read.zarr_store", "refindex.read.inspect", "refindex.read.nwb", "refindex.read.h5py_road",
             "refindex.read.xarray_backend")
MAX_MODULE_LINES = 500
MAX_LOOSE_MODULES = 8  # modules at the package's root, __init__ and __main__ aside
MODULES = architecture.load()


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_no_import_cycle():
    assert architecture.cycles(MODULES) == []


def test_lower_layers_never_import_higher_ones():
    bad = sorted((m.name, t) for m in MODULES.values() if _under(m.name, LOWER)
                 for t in m.imports if _under(t, HIGHER))
    assert bad == []


def test_no_private_name_imported_across_modules():
    assert [(m.name, t, n) for m in MODULES.values() for t, n in m.private] == []


def test_the_ground_floor_imports_only_itself():
    bad = sorted((m.name, t) for m in MODULES.values() if _under(m.name, GROUND)
                 for t in m.imports if not _under(t, GROUND))
    assert bad == []


def test_the_index_side_of_reading_never_imports_its_consumers():
    bad = sorted((m.name, t) for m in MODULES.values() if _under(m.name, INDEX_SIDE)
                 for t in m.imports if _under(t, CONSUMERS))
    assert bad == []


def test_no_module_is_over_500_lines():
    long = sorted((m.name, n) for m in MODULES.values() if (n := len(m.path.read_text().splitlines())) > MAX_MODULE_LINES)
    assert long == []


def test_the_package_root_holds_few_loose_modules():
    loose = sorted(m.name for m in MODULES.values()
                   if m.path.parent == architecture.PACKAGE and m.path.stem not in ("__init__", "__main__"))
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_classes_and_functions_stay_small():
    long_classes = [(m.name, c, n) for m in MODULES.values() for c, n in m.classes if n > 300]
    long_functions = [(m.name, f, n) for m in MODULES.values() for f, n in m.functions if n > 80]
    assert long_classes == [] and long_functions == []


def _tests_zarr_format(node: ast.AST) -> bool:
    """``x.zarr_format == 3``, ``zarr_format != 2``: a comparison of the zarr format number itself."""
    if not isinstance(node, ast.Compare) or not any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
        return False
    sides = [node.left, *node.comparators]
    return any(isinstance(s, ast.Name) and s.id == "zarr_format" or isinstance(s, ast.Attribute)
               and s.attr == "zarr_format" for s in sides)


def test_the_zarr_format_is_chosen_in_one_module():
    """The zarr format is chosen once (``refindex.formats.for_zarr``; the options validate and record it):
    the pipeline, codecs, conventions and readers ask the chosen format object, never ``zarr_format ==``
    (issue #46)."""
    testing = sorted(m.name for m in MODULES.values()
                     if any(_tests_zarr_format(n) for n in ast.walk(ast.parse(m.path.read_text()))))
    assert set(testing) <= {"refindex.formats", "refindex.options"} and len(testing) <= 2, testing


def test_importing_refindex_and_its_cli_loads_no_heavy_library():
    """``import refindex``, ``refindex --help`` and ``--version`` load neither h5py nor zarr, pandas, pyarrow,
    dask or pynwb."""
    code = ("import sys, refindex, refindex.cli as c\n"
            "for a in ('--help', '--version'):\n    try:\n        c.main([a])\n    except SystemExit:\n        pass\n"
            "heavy = {'h5py', 'zarr', 'numcodecs', 'pandas', 'pyarrow', 'dask', 'pynwb', 'hdmf', 'fsspec', 'numpy'}\n"
            "print(sorted(heavy & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
