"""The layering contract (ARCHITECTURE.md): engine < reports < widgets < Profile < magics/CLI,
and no import cycle anywhere in the package, lazy (in-function) and type-only imports included.

Read from the source with ``ast``, so a new upward or circular import fails here even when a
lazy import would hide it at run time. ``lint-imports`` (import-linter, ``make lint``) checks
the same layers on the package level.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import jlprof

ROOT = Path(jlprof.__file__).parent

# lowest first; a module may import only from its own layer or the ones below it
LAYERS: tuple[tuple[str, ...], ...] = (
    ("jlprof.version", "jlprof.errors", "jlprof.outputs", "jlprof.writer", "jlprof.background"),
    ("jlprof.engine", "jlprof.nsys"),
    ("jlprof.reports",),
    ("jlprof.widgets",),
    ("jlprof.profile",),
    ("jlprof.distributed",),  # many ranks on Dask: Profiles on workers, cross-rank reports
    (
        "jlprof.magics",
        "jlprof.cli",
        "jlprof.options",
        "jlprof.commands",
        "jlprof.console",
        "jlprof.viewer",
        "jlprof.__main__",
    ),
)


def _modules() -> dict[str, Path]:
    mods = {}
    for f in ROOT.rglob("*.py"):
        parts = ["jlprof", *f.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


def import_graph() -> dict[str, set[str]]:
    """Module -> the jlprof modules it imports anywhere in its source."""
    mods = _modules()

    def resolve(name: str) -> str:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                names = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names
                ]
            else:
                continue
            out |= {resolve(n) for n in names if n.split(".")[0] == "jlprof"} - {mod, ""}
        graph[mod] = out
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer_of(mod: str) -> int | None:
    for i, prefixes in enumerate(LAYERS):
        if any(mod == p or mod.startswith(p + ".") for p in prefixes):
            return i
    return None


def upward(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in sorted(graph.items()):
        lo = layer_of(mod)
        for dep in sorted(deps):
            hi = layer_of(dep)
            if lo is not None and hi is not None and hi > lo:
                bad.append(f"{mod} imports {dep} (layer {hi} above {lo})")
    return bad


def test_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_layers_import_only_downward() -> None:
    assert upward(import_graph()) == []


def test_engine_imports_no_upper_layer_at_run_time() -> None:
    """Importing the whole engine loads no report, widget, magic or CLI module."""
    import subprocess
    import sys

    below = (
        "jlprof.engine",
        "jlprof.errors",
        "jlprof.version",
        "jlprof.outputs",
        "jlprof.writer",
        "jlprof.background",
        "jlprof.nsys",
    )
    code = (
        "import sys, pkgutil, importlib, jlprof.engine as e\n"
        "for m in pkgutil.walk_packages(e.__path__, 'jlprof.engine.'):\n"
        "    importlib.import_module(m.name)\n"
        f"print(sorted(m for m in sys.modules if m.startswith('jlprof.')"
        f" and not m.startswith({below!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("graph", "expect"),
    [
        ({"jlprof.engine.a": {"jlprof.reports.b"}, "jlprof.reports.b": set()}, "upward"),
        (
            {"jlprof.reports.a": {"jlprof.reports.b"}, "jlprof.reports.b": {"jlprof.reports.a"}},
            "cycle",
        ),
    ],
)
def test_the_checks_catch_a_violation(graph: dict[str, set[str]], expect: str) -> None:
    """A new upward import or cycle fails the two tests above (the checks are not vacuous)."""
    assert (upward(graph) != []) == (expect == "upward")
    assert (cycles(graph) != []) == (expect == "cycle")
