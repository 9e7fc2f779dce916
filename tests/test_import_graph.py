"""The import graph of the project's packages (coevo, flows, tasks, schemas), read from the source.

The graph is built with `ast`, never by importing anything: every `import` and `from ... import`
statement of every module counts, wherever it stands — at module level, inside a function (such an
import only runs later: a cycle through it is still a cycle, merely hidden), and under
`if TYPE_CHECKING:` (a type-only import is still a dependency of the module's meaning, and
`typing.get_type_hints` executes it). Relative imports are resolved against the importing module;
`from pkg import name` is an edge to the submodule `pkg.name` when that is a module of the project,
else to `pkg`. Imports of anything outside the four packages are ignored. Importing `pkg.sub.mod`
from outside `pkg.sub` also runs `pkg/sub/__init__.py` first, so it is an edge to `pkg.sub` too
(importing coevo.coevolvers.writers from outside runs coevo/coevolvers/__init__.py, which imports
every co-evolver; a package __init__ with no import statement, a docstring only, runs nothing and
gets no such edge); from inside `pkg.sub` it is not (the package is already being initialised: a
package __init__ that re-exports its submodules would otherwise be a cycle with each of them). The
root packages (coevo, flows, tasks, schemas) get no such edges: any import of the project runs them
first, and coevo/__init__.py imports only the API it re-exports, on first use.

Two rules:
- no cycles: a cycle is reported as a chain of module names, each edge with the file and line of
  the import (a function-level one marked);
- no upward imports: each module belongs to one layer of `LAYERS` (lowest first), and imports only
  modules of its own layer or lower ones.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("coevo", "flows", "tasks", "schemas")

# The layers, lowest first. A module is in the layer of its longest matching entry: an entry names
# a module, or a package together with every module under it; the entry `coevo` alone names only the
# package's __init__ (the facade over coevo.api), so every other module of coevo is placed
# explicitly: a new top-level module or subpackage is a decision about where it stands.
LAYERS: dict[str, tuple[str, ...]] = {
    # no project imports but each other's: the config model, errors, types, files, registries, seeds,
    # the fault points, the progress display, the run lock, the records that cross the stages, and the table schemas
    "foundation": (
        "coevo.config",
        "coevo.errors",
        "coevo.faults",
        "coevo.io",
        "coevo.layout",
        "coevo.params_comments",
        "coevo.progress",
        "coevo.records",
        "coevo.registry",
        "coevo.runlock",
        "coevo.seeding",
        "coevo.types",
        "schemas",
    ),
    # building blocks everything above uses, on the foundation only: the code families' specs, how a
    # problem becomes a prompt (with the tools an episode shows), which training problems an
    # iteration sees, user code named in params (a package's __init__ that only documents it is no import)
    "building blocks": (
        "coevo.code.families",
        "coevo.plugins",
        "coevo.rollout.prompting",
        "coevo.rollout.sampler",
        "coevo.rollout.tools",
    ),
    # the library: problems, the rollout's prompts and engines, verification and rewards, code and the
    # sandbox, the policy update and its objectives, the model's lifecycle, the co-evolvers, tracking
    # and the artifact store
    "library": (
        "coevo.code",
        "coevo.coevolvers",
        "coevo.environments",
        "coevo.evaluation",
        "coevo.metrics_log",
        "coevo.model",
        "coevo.prepare",
        "coevo.problems",
        "coevo.report",
        "coevo.rollout",
        "coevo.sandbox",
        "coevo.sharding",
        "coevo.store",
        "coevo.tracking",
        "coevo.update",
        "coevo.verification",
    ),
    # the stages of an iteration (coevo/stages/, one module per stage) and the plain drivers over them
    # (the loop, the distributed update's ranks, the comparison of arms)
    "stages": (
        "coevo.compare",
        "coevo.driver",
        "coevo.loop",
        "coevo.stages",
        "coevo.update.rank",
    ),
    # the Prefect tasks and flows over the stages
    "pipelines": ("flows", "tasks"),
    # what users call: the Python API (and the package that re-exports it) and the command line; above
    # the pipelines, since `coevo train`, `coevo compare` and coevo.train() run the Prefect flows
    "entry points": (
        "coevo",
        "coevo.api",
        "coevo.cli",
        "coevo.cli_support",
        "coevo.store.lineage_cli",
        "coevo.store.query_cli",
    ),
}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: str
    line: int
    in_function: bool
    via_package: bool = False  # the edge to a package whose __init__ importing one of its modules runs

    def where(self) -> str:
        notes = [
            note
            for note, on in (
                ("in a function", self.in_function),
                (f"runs {self.target.replace('.', '/')}/__init__.py", self.via_package),
            )
            if on
        ]
        return f"{self.path}:{self.line}{''.join(f' ({note})' for note in notes)}"


def project_modules(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package __init__) for every .py file of the packages."""
    modules = {}
    for package in PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            parts = list(file.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            modules[".".join(parts[:-1] if is_package else parts)] = (file, is_package)
    return modules


def _owner(name: str, modules: dict) -> str | None:
    """The project module `name` is, or lies in (a name imported from it); None outside the project."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules: dict) -> list[str]:
    if isinstance(node, ast.Import):
        return [t for alias in node.names if (t := _owner(alias.name, modules))]
    if node.level:  # relative: from the module's package, one level up per extra dot
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    found = []
    for alias in node.names:
        submodule = f"{prefix}.{alias.name}"
        target = submodule if submodule in modules else _owner(prefix, modules)
        if target:
            found.append(target)
    return found


def _imports(file: Path) -> bool:
    """Whether a module has any import statement (a package __init__ without one runs nothing when a
    submodule is imported: no edge to it)."""
    return any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in ast.walk(ast.parse(file.read_text())))


def import_edges(root: Path = ROOT) -> list[Edge]:
    """Every import between two project modules, with where it stands."""
    modules = project_modules(root)
    edges, inert = [], {name for name, (file, is_package) in modules.items() if is_package and not _imports(file)}
    for module, (file, is_package) in modules.items():
        tree = ast.parse(file.read_text(), str(file))
        in_function: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                in_function.update(id(inner) for inner in ast.walk(node) if inner is not node)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, is_package, node, modules):
                    where = (str(file.relative_to(root)), node.lineno, id(node) in in_function)
                    if target != module:
                        edges.append(Edge(module, target, *where))
                    parts = target.split(".")
                    for depth in range(2, len(parts)):  # the packages above the target, below the root
                        package = ".".join(parts[:depth])
                        if (
                            package in modules
                            and package not in inert
                            and module != package
                            and not module.startswith(package + ".")
                        ):
                            edges.append(Edge(module, package, *where, via_package=True))
    return edges


def _graph(edges: list[Edge]) -> dict[str, dict[str, Edge]]:
    graph: dict[str, dict[str, Edge]] = {}
    for edge in edges:
        graph.setdefault(edge.source, {}).setdefault(edge.target, edge)
    return graph


def strongly_connected(graph: dict[str, dict[str, Edge]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    nodes = sorted(set(graph) | {t for targets in graph.values() for t in targets})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, {})))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return sorted(components)


def shortest_cycle(graph: dict[str, dict[str, Edge]], component: list[str], start: str | None = None) -> list[Edge]:
    """A shortest cycle through `start` (default: the component's first module), breadth-first within the component."""
    start, members = start or component[0], set(component)
    came: dict[str, Edge | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ, edge in sorted(graph.get(node, {}).items()):
            if succ not in members:
                continue
            if succ == start:
                chain = [edge]
                while (back := came[chain[0].source]) is not None:
                    chain.insert(0, back)
                return chain
            if succ not in came:
                came[succ] = edge
                queue.append(succ)
    raise AssertionError(f"no cycle through {start} in {component}")


def format_cycle(chain: list[Edge]) -> str:
    lines = [" -> ".join([chain[0].source] + [edge.target for edge in chain])]
    lines += [f"    {edge.source} -> {edge.target}  at {edge.where()}" for edge in chain]
    return "\n".join(lines)


def describe_component(graph: dict[str, dict[str, Edge]], component: list[str]) -> str:
    """The modules of a strongly connected component and shortest cycles through them until each is on one."""
    lines, covered = [f"modules importing each other: {', '.join(component)}"], set()
    for module in component:
        if module not in covered:
            chain = shortest_cycle(graph, component, module)
            covered |= {edge.source for edge in chain}
            lines += ["  " + line for line in format_cycle(chain).splitlines()]
    return "\n".join(lines)


def layer_of(module: str) -> tuple[int, str]:
    """(rank, entry) of the longest LAYERS entry naming `module` or a package above it."""
    best: tuple[int, str] | None = None
    for rank, entries in enumerate(LAYERS.values()):
        for entry in entries:
            if module == entry or (module.startswith(entry + ".") and entry != "coevo"):
                if best is None or len(entry) > len(best[1]):
                    best = (rank, entry)
    if best is None:
        raise KeyError(f"{module} is in no layer of LAYERS (tests/test_import_graph.py): place it")
    return best


def upward_imports(edges: list[Edge]) -> list[Edge]:
    """The imports from a module to one of a higher layer."""
    return [edge for edge in edges if layer_of(edge.target)[0] > layer_of(edge.source)[0]]


def test_the_graph_sees_imports_inside_functions_and_type_checking_blocks(tmp_path):
    """The parser itself: function-level, TYPE_CHECKING, relative and `from pkg import submodule` imports all count."""
    pkg = tmp_path / "coevo"
    (pkg / "sub").mkdir(parents=True)
    for package in PACKAGES[1:]:
        (tmp_path / package).mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from coevo.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import X\n")
    (pkg / "c.py").write_text("import coevo.a\nimport os\n")
    edges = {(e.source, e.target, e.in_function, e.via_package) for e in import_edges(tmp_path)}
    assert edges == {
        ("coevo.a", "coevo.sub.b", True, False),
        ("coevo.a", "coevo.sub", True, True),  # importing coevo.sub.b from outside runs coevo/sub/__init__.py
        ("coevo.sub", "coevo.sub.b", False, False),
        ("coevo.sub.b", "coevo.c", False, False),
        ("coevo.c", "coevo.a", False, False),
    }
    graph = _graph(import_edges(tmp_path))
    assert strongly_connected(graph) == [["coevo.a", "coevo.c", "coevo.sub", "coevo.sub.b"]]
    assert (
        format_cycle(shortest_cycle(graph, ["coevo.a", "coevo.c", "coevo.sub", "coevo.sub.b"])).splitlines()[0]
        == "coevo.a -> coevo.sub.b -> coevo.c -> coevo.a"
    )


def test_no_import_cycles():
    graph = _graph(import_edges())
    groups = [describe_component(graph, component) for component in strongly_connected(graph)]
    assert not groups, (
        f"{len(groups)} group(s) of modules in import cycles, each with shortest cycles through its modules:\n"
        + "\n".join(groups)
    )


def test_every_module_has_a_layer():
    unplaced = []
    for module in project_modules():
        try:
            layer_of(module)
        except KeyError as exc:
            unplaced.append(str(exc))
    assert not unplaced, "\n".join(unplaced)


def test_no_upward_imports():
    names = list(LAYERS)
    upward = [
        f"{e.source} ({names[layer_of(e.source)[0]]}) -> {e.target} ({names[layer_of(e.target)[0]]})  at {e.where()}"
        for e in upward_imports(import_edges())
    ]
    assert not upward, (
        f"{len(upward)} import(s) from a lower layer to a higher one (LAYERS, lowest first: {names}):\n"
        + "\n".join(upward)
    )
