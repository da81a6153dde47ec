"""Facts about refindex's own code, read from its syntax trees: imports between its modules
(function-level ones included, ``TYPE_CHECKING`` ones aside), cycles among them, private
names imported across modules, and the longest classes and functions.

``python tests/architecture.py`` prints them; tests/test_architecture.py holds the rules.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "refindex"


@dataclass
class Module:
    name: str  # dotted, "refindex.scanner.walk"
    path: Path
    imports: set[str] = field(default_factory=set)  # refindex modules it imports
    private: list[tuple[str, str]] = field(default_factory=list)  # (module, _name) imported from another module
    classes: list[tuple[str, int]] = field(default_factory=list)  # (qualname, lines)
    functions: list[tuple[str, int]] = field(default_factory=list)


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(current: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = current.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


def _under_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def load(package: Path = PACKAGE) -> dict[str, Module]:
    modules = {_module_name(p): Module(_module_name(p), p) for p in sorted(package.rglob("*.py"))}
    for mod in modules.values():
        tree = ast.parse(mod.path.read_text(), str(mod.path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        is_package = mod.path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not _under_type_checking(node, parents):
                if isinstance(node, ast.Import):
                    targets = [(a.name, None) for a in node.names]
                else:
                    base = _resolve(mod.name, is_package, node.level, node.module)
                    targets = [(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base, a.name)
                               for a in node.names]
                for target, name in targets:
                    if target in modules and target != mod.name:
                        mod.imports.add(target)
                        if name and name.startswith("_") and not name.startswith("__"):
                            mod.private.append((target, name))
            if isinstance(node, ast.ClassDef):
                mod.classes.append((node.name, node.end_lineno - node.lineno + 1))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                mod.functions.append((node.name, node.end_lineno - node.lineno + 1))
    return modules


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in modules[v].imports:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    return sorted(out)


def report(modules: dict[str, Module]) -> str:
    cls = max(((f"{m.name}.{c}", n) for m in modules.values() for c, n in m.classes), key=lambda x: x[1])
    fn = max(((f"{m.name}.{f}", n) for m in modules.values() for f, n in m.functions), key=lambda x: x[1])
    private = [(m.name, t, n) for m in modules.values() for t, n in m.private]
    lines = [f"modules: {len(modules)}",
             f"import cycles: {len(cycles(modules))} {cycles(modules)}",
             f"largest class: {cls[0]} ({cls[1]} lines)",
             f"largest function: {fn[0]} ({fn[1]} lines)",
             f"functions over 80 lines: {sum(1 for m in modules.values() for _, n in m.functions if n > 80)}",
             f"private names imported across modules: {len(private)} {private}"]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(load(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)))
