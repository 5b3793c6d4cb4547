"""No import cycle among the modules of ``kvpilot`` and ``kvbench``.

Every import counts, wherever it is: one inside a function or under ``if
TYPE_CHECKING`` hides a circle from Python but not from the reader (two
modules that each need the other are one module, or want a third). ``from
pkg import sub`` inside ``pkg`` depends on the submodule, not on ``pkg``'s
own ``__init__`` (which is always running by then).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOTS = {
    "kvpilot": Path(__file__).resolve().parents[1] / "kvpilot",
    "kvbench": Path(__file__).resolve().parents[3] / "host" / "bench" / "python" / "kvbench",
}


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def _imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, wherever it is."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def _deps(name: str, f: Path, known: dict[str, Path]) -> set[str]:
    is_pkg = f.name == "__init__.py"
    out: set[str] = set()
    for node in _imports(ast.parse(f.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
            continue
        base = node.module or ""
        if node.level:
            pkg = name.split(".") if is_pkg else name.split(".")[:-1]
            pkg = pkg[: len(pkg) - (node.level - 1)]
            base = ".".join(pkg + ([base] if base else []))
        if not name.startswith(base + "."):
            out.add(base)
        out.update(f"{base}.{a.name}" for a in node.names)
    # Importing pkg.sub runs pkg's __init__ first (unless the importer is in pkg).
    for d in list(out):
        parts = d.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if not name.startswith(parent + "."):
                out.add(parent)
    return {d for d in out if d in known and d != name}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(u: str, path: list[str]) -> list[str] | None:
        state[u] = 1
        path.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                return [*path[path.index(v) :], v]
            if v not in state and (c := visit(v, path)):
                return c
        path.pop()
        state[u] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m, [])):
            return c
    return None


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_no_import_cycle(package: str) -> None:
    mods = _modules(ROOTS[package])
    assert len(mods) > 5, f"found only {sorted(mods)} under {ROOTS[package]}"
    graph = {m: _deps(m, f, mods) for m, f in mods.items()}
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_cycle_is_found() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
