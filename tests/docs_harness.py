"""Running the examples of the documentation (README.md and docs/*.md): the convention, in code.

* Every fenced block marked ``python``, ``bash``, ``sh`` or ``console`` runs; other blocks
  (``text``, ``json``, unmarked) are shown only.  A block whose last non-blank line before the
  fence is ``<!-- not-run: reason -->`` is skipped (for what cannot run here: a real archive).
* The blocks of one page run in order, in one fresh process (:func:`run_page` starts
  ``python tests/docs_harness.py PLAN.json``): python blocks share one namespace; each shell
  block is a ``bash -e -o pipefail`` script; a ``console`` block runs its ``$ `` lines.  All
  run in the page's own folder, which holds the files tests/docfiles.py builds.  Pages never share
  an interpreter; within a page, a block may use what an earlier block imported, but not a
  refindex submodule that only a call imported (``refindex.read.x`` after ``import refindex``):
  those are checked in a fresh interpreter at the end of the page (:func:`submodule_paths`).
* ``https://data.example.org/`` in a block becomes the URL of a loopback HTTP server (Range,
  ETag, Last-Modified) serving that folder (:class:`FolderServer`); ``s3://bucket/`` works
  against a moto server holding the same files (``AWS_ENDPOINT_URL`` and keys in the
  environment).

A failing block fails its page with the page's file name and the block's line, and the
traceback's lines are the page's lines.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import subprocess
import sys
import time
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import webserver

RUN = {"python": "python", "py": "python", "bash": "shell", "sh": "shell", "shell": "shell", "console": "console"}
EXAMPLE_URL = "https://data.example.org/"
EXAMPLE_BUCKET = "s3://bucket/"
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*$")


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the block's first code line in the page
    kind: str  # python, shell, console, or "" (shown only)
    lang: str
    code: str
    skip: str | None = None  # the not-run reason


def blocks(text: str, page: str) -> list[Block]:
    """Every fenced code block of a Markdown page, in order."""
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group("fence"), m.group("info").lower()
        prev = next((ln for ln in reversed(lines[:i]) if ln.strip()), "")
        skip = _NOT_RUN.match(prev)
        start, i = i + 1, i + 1
        while i < len(lines) and not (lines[i].strip().startswith(fence[0] * len(fence))
                                      and not lines[i].strip().strip(fence[0])):
            i += 1
        indent = len(m.group("indent"))
        code = "\n".join(ln[indent:] if ln[:indent].isspace() else ln for ln in lines[start:i])
        out.append(Block(page, start + 1, RUN.get(lang, ""), lang, code, skip.group("reason") if skip else None))
        i += 1
    return out


def runnable(page_blocks: list[Block]) -> list[Block]:
    return [b for b in page_blocks if b.kind and b.skip is None]


def substitute(code: str, http_url: str | None) -> str:
    return code.replace(EXAMPLE_URL, http_url) if http_url else code


def console_commands(code: str) -> str:
    """The commands of a ``console`` block: its ``$ `` lines (and their ``\\`` continuations)."""
    out, more = [], False
    for ln in code.splitlines():
        if more or ln.startswith("$ "):
            out.append(ln if more else ln[2:])
            more = ln.rstrip().endswith("\\")
    return "\n".join(out)


# ---------------------------------------------------------------- the loopback HTTP server


class FolderServer:
    """``with FolderServer(folder) as url:`` serves ``folder`` at ``url`` (``http://127.0.0.1:PORT/``), with
    Range, ETag and Last-Modified as object stores and web servers do (the suite's loopback server)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = folder
        self._serving = contextlib.ExitStack()

    def __enter__(self) -> str:
        server = self._serving.enter_context(webserver.serve(folder=self.folder))
        return server.base + "/"

    def __exit__(self, *exc: Any) -> None:
        self._serving.close()


# ---------------------------------------------------------------- one page in one process


def run_page(page: Path, folder: Path, http_url: str, env: dict[str, str], timeout: float = 240) -> tuple[int, str]:
    """Run ``page``'s runnable blocks in ``folder`` in a fresh interpreter; returns (exit code, output)."""
    plan = [asdict(b) | {"code": substitute(b.code, http_url)}
            for b in runnable(blocks(page.read_text(encoding="utf-8"), str(page)))]
    plan_file = folder / ".docs-plan.json"
    plan_file.write_text(json.dumps(plan))
    proc = subprocess.run([sys.executable, "-X", "utf8", __file__, str(plan_file)], cwd=folder, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          start_new_session=True)
    return proc.returncode, proc.stdout


# ---------------------------------------------------------------- names a page may lean on
#
# A page's blocks share one namespace, so a block may use what an earlier one imported.  But a
# submodule reached as an attribute (``refindex.read.cache_folder()``) may be there only because a
# function the page called imported it: a reader who runs that block after ``import refindex``
# meets ``AttributeError``.  Every such attribute path into refindex a block uses is checked, once
# per page, in a fresh interpreter that does only the refindex imports the page wrote (refindex's
# names load lazily, so what a call imported is easily taken for what ``import refindex`` gives;
# other packages' submodules are theirs to keep, and checking them would import xarray and pynwb
# once more per page).

OWN = "refindex"


def written_imports(tree: ast.AST) -> set[str]:
    """The modules a block's import statements name (``import a.b`` -> a.b; ``from a import b`` -> a, a.b)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*")
    return out


def submodule_paths(tree: ast.AST, namespace: dict[str, Any], written: set[str]) -> set[tuple[str, tuple[str, ...]]]:
    """(module, attributes): each ``name.sub[.sub...]`` of the block that reaches a submodule of a refindex
    module bound in ``namespace``, where no import the page wrote names that submodule."""
    out = set()
    for node in ast.walk(tree):
        attrs: list[str] = []
        while isinstance(node, ast.Attribute):
            attrs.insert(0, node.attr)
            node = node.value
        root = namespace.get(node.id) if isinstance(node, ast.Name) and attrs else None
        if not isinstance(root, types.ModuleType) or root.__name__.split(".")[0] != OWN:
            continue
        obj, hops = root, []
        for a in attrs:
            obj = getattr(obj, a, None)
            if not isinstance(obj, types.ModuleType):
                break
            hops.append(a)
        dotted = [f"{root.__name__}.{'.'.join(hops[:i + 1])}" for i in range(len(hops))]
        if hops and not all(any(w == d or w.startswith(d + ".") for w in written) for d in dotted):
            out.add((root.__name__, tuple(hops)))
    return out


_FRESH_CHECK = """
import importlib, json, sys
written, paths = json.loads(sys.argv[1])
for name in written:
    try:
        importlib.import_module(name)
    except Exception:
        pass
for module, hops, where in paths:
    obj = importlib.import_module(module)
    for i, a in enumerate(hops):
        if not hasattr(obj, a):
            name = ".".join([module, *hops[:i + 1]])
            print(f"FAILED: {where}: `{name}` is there only because something the page ran imported it: a fresh "
                  f"interpreter that does the page's imports ({', '.join(written) or module}) has no `{name}`")
            sys.exit(1)
        obj = getattr(obj, a)
"""


def check_in_fresh_interpreter(written: set[str], paths: list[tuple[str, tuple[str, ...], str]]) -> int:
    """0 when every path resolves in a fresh interpreter after the page's own imports (else 1, said why)."""
    if not paths:
        return 0
    sys.stdout.flush()
    own = sorted(w for w in written if w.split(".")[0] == OWN)
    return subprocess.run([sys.executable, "-c", _FRESH_CHECK, json.dumps([own, paths])],
                          stderr=subprocess.STDOUT).returncode


def _run_plan(plan_file: str) -> int:
    """The child: every block of the plan, in order; the first failure ends the page."""
    import traceback

    sys.path[0] = os.getcwd()  # as for a script in the page's folder, not tests/
    namespace: dict[str, Any] = {"__name__": "__main__"}
    written: set[str] = set()
    leaning: list[tuple[str, tuple[str, ...], str]] = []
    started = time.perf_counter()
    for b in json.loads(Path(plan_file).read_text()):
        where = f"{b['page']}:{b['line']} ({b['lang']} block)"
        print(f"--- {where}, at {time.perf_counter() - started:.1f} s", flush=True)
        if b["kind"] == "python":
            try:  # blank lines in front keep the page's line numbers in tracebacks
                tree = ast.parse("\n" * (b["line"] - 1) + b["code"], b["page"])
                exec(compile(tree, b["page"], "exec"), namespace)
            except BaseException:
                traceback.print_exc()
                print(f"FAILED: {where}", flush=True)
                return 1
            written |= written_imports(tree)
            leaning += [(m, hops, where) for m, hops in sorted(submodule_paths(tree, namespace, written))]
            continue
        script = console_commands(b["code"]) if b["kind"] == "console" else b["code"]
        sys.stdout.flush()
        rc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], stderr=subprocess.STDOUT).returncode
        if rc:
            print(f"FAILED: {where}: exit {rc} from\n{script}", flush=True)
            return 1
    print(f"--- names the page leans on, at {time.perf_counter() - started:.1f} s: "
          f"{sorted({'.'.join([m, *h]) for m, h, _ in leaning}) or 'none'}", flush=True)
    return check_in_fresh_interpreter(written, leaning)


if __name__ == "__main__":
    sys.exit(_run_plan(sys.argv[1]))
