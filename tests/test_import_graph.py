"""No import circles among our own modules (``src/`` and ``services/kernel-service/src``), and the kernel
service's rooms import only downwards (``ROOMS``: the judge core, the two benchmarks, the workers, the service).

The graph is read from the source with :mod:`ast`, nothing is imported. A module's edges are every
``import``/``from ... import`` it holds, at module level and inside functions alike: a deferred import
is how a circle gets hidden, not how it is removed, and it still runs. Relative imports are resolved
against the module's package; ``from pkg import name`` is an edge to ``pkg.name`` when that is one of
our modules, else to ``pkg``.

Left out, on purpose:

* imports under ``if TYPE_CHECKING:``: they never run, and annotations may name each other freely;
* the implicit import of parent packages (``import a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``):
  a package's ``__init__`` re-exporting its children would otherwise make every child that imports a
  sibling through the package look circular. An ``__init__`` is still a node, with its own edges.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = (ROOT / "src", ROOT / "services" / "kernel-service" / "src")


def discover(roots: tuple[Path, ...] = SOURCE_ROOTS) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's ``__init__``) for every ``.py`` under ``roots``."""
    modules: dict[str, tuple[Path, bool]] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            if parts:
                modules[".".join(parts)] = (path, is_package)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node`` (functions and classes included), skipping the bodies of
    ``if TYPE_CHECKING:`` (their ``else:`` branches do run)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.orelse:
                yield from _imports_in_stmt(stmt)
        else:
            yield from _imports(child)


def _imports_in_stmt(stmt: ast.stmt) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        yield stmt
    else:
        yield from _imports(stmt)


def edges_of(name: str, path: Path, is_package: bool, modules: dict[str, tuple[Path, bool]]) -> set[str]:
    """The modules of ours that ``name`` imports."""
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for stmt in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                target = alias.name
                while target and target not in modules:  # ``import a.b.thing`` where thing is no module
                    target = target.rpartition(".")[0]
                if target:
                    out.add(target)
            continue
        if stmt.level:
            base_parts = package.split(".") if package else []
            base_parts = base_parts[: len(base_parts) - (stmt.level - 1)] if stmt.level > 1 else base_parts
            base = ".".join([*base_parts, stmt.module] if stmt.module else base_parts)
        else:
            base = stmt.module or ""
        for alias in stmt.names:
            sub = f"{base}.{alias.name}" if base else alias.name
            if sub in modules:
                out.add(sub)
            elif base in modules:
                out.add(base)
    out.discard(name)
    return out


def import_graph(roots: tuple[Path, ...] = SOURCE_ROOTS) -> dict[str, set[str]]:
    modules = discover(roots)
    return {name: edges_of(name, path, pkg, modules) for name, (path, pkg) in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_sees_our_modules() -> None:
    graph = import_graph()
    assert "benchmark_runner.cli" in graph and "kernel_service.service" in graph
    assert "benchmark_runner.runs" in graph["benchmark_runner.cli"]  # the CLI is a shell over the API
    assert "benchmark_runner.runs" in graph["benchmark_runner.api"]
    assert "kernel_service.backendbench.catalog" in graph["kernel_service.backendbench.opinfo"]


def test_no_import_circles() -> None:
    found = cycles(import_graph())
    assert found == [], "import circles (each line one strongly connected set of modules):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_the_check_can_fail(tmp_path: Path) -> None:
    """A circle through a relative, function-level import is found; one under TYPE_CHECKING is not."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import d\n")
    (pkg / "d.py").write_text("import pkg.c\n")
    assert cycles(import_graph((tmp_path,))) == [["pkg.a", "pkg.sub.b"]]


# ---- the kernel service's rooms -----------------------------------------------------------------------

#: The kernel service's rooms, lowest first (services/kernel-service/README.md, "Architecture"): a module
#: may import its own room and the rooms below it; the two benchmarks, on one level, not each other.
ROOMS: tuple[tuple[str, int], ...] = (
    ("kernel_service.judging", 0),  # the judge core both benchmarks share
    ("kernel_service.kernelbench", 1),
    ("kernel_service.backendbench", 1),
    ("kernel_service.workers", 2),  # the process runtime: pools, workers, zygote, side processes
)
#: Everything else in ``kernel_service`` (service, cli, the result cache...) is the top room.
TOP = ("kernel_service", 3)


def room_of(module: str) -> tuple[str, int] | None:
    """The room of ``module`` and its level; None outside the kernel service."""
    for room, level in ROOMS:
        if module == room or module.startswith(room + "."):
            return room, level
    if module == TOP[0] or module.startswith(TOP[0] + "."):
        return TOP
    return None


def room_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import that goes up a room, or across between the two benchmarks' rooms."""
    found = []
    for name, targets in sorted(graph.items()):
        mine = room_of(name)
        if mine is None:
            continue
        for target in sorted(targets):
            theirs = room_of(target)
            if theirs is None or theirs[0] == mine[0]:
                continue
            if theirs[1] >= mine[1]:
                found.append(f"{name} ({mine[0]}) imports {target} ({theirs[0]})")
    return found


def test_the_kernel_service_rooms_import_only_downwards() -> None:
    """The judge core imports no benchmark, runtime or service module; KernelBench and BackendBench
    import neither each other nor the runtime or the service; the runtime imports no service module."""
    graph = import_graph()
    assert "kernel_service.judging.judging" in graph and "kernel_service.workers.worker" in graph
    found = room_violations(graph)
    assert found == [], "imports against the rooms' order:\n" + "\n".join(found)


def test_the_room_check_can_fail() -> None:
    graph = {
        "kernel_service.judging.harness": {"kernel_service.judging.schemas", "kernel_service.workers.pool"},
        "kernel_service.kernelbench.judge": {
            "kernel_service.judging.harness",
            "kernel_service.backendbench.x",
        },
        "kernel_service.workers.pool": {"kernel_service.service", "kernel_service.kernelbench.judge"},
        "kernel_service.service": {"kernel_service.workers.pool", "benchmark_runner.service"},
    }
    assert room_violations(graph) == [
        "kernel_service.judging.harness (kernel_service.judging) imports kernel_service.workers.pool "
        "(kernel_service.workers)",
        "kernel_service.kernelbench.judge (kernel_service.kernelbench) imports kernel_service.backendbench.x "
        "(kernel_service.backendbench)",
        "kernel_service.workers.pool (kernel_service.workers) imports kernel_service.service (kernel_service)",
    ]
