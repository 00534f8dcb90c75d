"""The import contract: layers point one way, and no module imports itself back.

    cli -> pipelines -> {align, lm} -> {io, kernels} -> sinkhorn -> leaf modules

A module may import from its own subpackage or from a lower layer, never from a higher one
or from a sibling on the same layer (``align`` and ``lm`` do not import each other, nor do
``io`` and ``kernels``). Imports inside functions count too: a lazy import of a higher layer
is still the wrong direction. The graph is read from the source (``ast``), so the check
needs no optional dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sinkalign"

# subpackage (or leaf module) -> layer; higher numbers may import lower ones
LAYERS = {
    "errors": 0, "utils": 0,
    "alignment": 1,
    "sinkhorn": 2,
    "io": 3, "kernels": 3,
    "align": 4, "lm": 4,
    "pipelines": 5,
    "cli": 6,
}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


MODULES = _modules()


def _resolve(name: str) -> str:
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(name: str, path: Path) -> set[tuple[str, bool]]:
    """(imported sinkalign module, imported at module level?) pairs of one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = {id(node) for node in tree.body}
    for node in tree.body:  # `if TYPE_CHECKING:` / try blocks at module level count as top level
        if isinstance(node, (ast.If, ast.Try)):
            top_level |= {id(n) for n in ast.walk(node)}
    out = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            targets = [f"{module}.{a.name}" for a in node.names]
        for target in targets:
            if target.startswith("sinkalign.") or target == "sinkalign":
                resolved = _resolve(target)
                if resolved != name:
                    out.add((resolved, id(node) in top_level))
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_part_has_a_layer():
    parts = {_part(m) for m in MODULES} - {"", "data"}
    assert parts <= set(LAYERS), f"give these a layer in LAYERS: {sorted(parts - set(LAYERS))}"


def test_layers_point_one_way():
    wrong = []
    for module, imports in sorted(GRAPH.items()):
        src = _part(module)
        if not src:  # the package's lazy facade may name anything
            continue
        for target, _ in sorted(imports):
            dst = _part(target)
            if dst and dst != src and LAYERS[dst] >= LAYERS[src]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_no_import_cycles_at_module_level():
    graph = {m: {t for t, top in imports if top} for m, imports in GRAPH.items()}
    # a package's __init__ importing its own submodules is the usual re-export, not a cycle
    for m in graph:
        graph[m] = {t for t in graph[m] if not t.startswith(m + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


@pytest.mark.parametrize("module, forbidden", [
    ("sinkalign.sinkhorn.core", "sinkalign.kernels"),
    ("sinkalign.align.aligner", "sinkalign.align.train"),
    ("sinkalign.lm.generate", "sinkalign.lm.train"),
])
def test_inference_does_not_import_what_it_does_not_need(module, forbidden):
    reached, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in reached:
            continue
        reached.add(m)
        todo.extend(t for t, top in GRAPH[m] if top)
    assert not {m for m in reached if m == forbidden or m.startswith(forbidden + ".")}


def test_the_checker_sees_a_wrong_import(tmp_path):
    """The contract would catch a reversed import (guards the checker itself)."""
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from sinkalign.cli.main import cli\n")
    assert ("sinkalign.cli.main", False) in _imports("sinkalign.io.x", path)


@pytest.mark.parametrize("package", ["sinkalign", "sinkalign.lm"])
def test_type_checkers_see_every_lazy_export(package):
    """A package that exports its names lazily (``_EXPORTS``, loaded by ``__getattr__``) also
    imports each of them under ``if TYPE_CHECKING:`` from the module ``_EXPORTS`` names, so that
    editors and type checkers see them (``py.typed``), and no other."""
    import importlib

    path = MODULES[package]
    seen = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            seen |= {(a.name, n.module) for n in ast.walk(node) if isinstance(n, ast.ImportFrom) for a in n.names}
    exports = importlib.import_module(package)._EXPORTS
    assert seen == set(exports.items()), seen ^ set(exports.items())
