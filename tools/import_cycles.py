"""List the import cycles among a package's modules and among its parts (stdlib `ast` only: nothing is imported).

`python tools/import_cycles.py [PACKAGE_DIR]` (default: ffnbench) prints one line per cycle and exits 1 if a
module-level cycle or a cycle among the package's parts exists; `--layers` also prints the parts in layers (each
imports only from the layers below it). Two kinds of edge:

    module-level  an import that runs when the module is imported (at the top, or in a class body or an
                  `if`/`try` at module level); `if TYPE_CHECKING:` blocks never run, so they are left out
    lazy          an import inside a function, which runs only when the function is called

A module-level cycle means which module is half-initialised depends on which one was imported first. Lazy
cycles are listed apart (`~>` marks the lazy edge): they do not fail, but a lazy import that exists only to
dodge a cycle usually means a shared piece belongs in a module of its own.

An edge goes to each module an import names: `import a.b` goes to `a.b`; `from a.b import c` goes to `a.b`
(the statement reads that module's namespace, half-built while it is still importing) and also to `a.b.c`
when that is a module. Importing a submodule also runs its parent packages' `__init__`, but that implicit
edge is not counted: a package `__init__` may re-export its submodules, and a cycle through it is found only
when a submodule names the package itself (`from a import name`, `from a import submodule`), which it should
not: it imports from the defining submodule instead (`from a.submodule import name`, `import a.submodule`).

The parts of a package are its direct subpackages and top-level modules (ffnbench.claims, ffnbench.train). Part A
imports part B when any module of A imports any module of B, at module level or inside a function alike: a lazy
import still ties A to B, so it counts here. The parts must form no cycle at all (two parts importing each other is
the shortest), with no exception: then they stack in layers, and the layers say which part may import which.
"""

from __future__ import annotations

import ast
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Graph:
    """The import edges among one package's modules.

    Attributes:
        modules: every module's dotted name → its source file.
        eager: module → the package modules it imports at module level.
        lazy: module → the package modules it imports inside a function only.
    """

    modules: dict[str, Path]
    eager: dict[str, set[str]] = field(default_factory=dict)
    lazy: dict[str, set[str]] = field(default_factory=dict)


def module_names(package_dir: Path) -> dict[str, Path]:
    """Every module under `package_dir` (a package, named for its folder) → its file; a package is its `__init__`."""
    root = package_dir.parent
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    """Whether an `if` test is `TYPE_CHECKING` or `typing.TYPE_CHECKING`."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node: ast.AST, in_function: bool = False):
    """Yield (import node, whether it sits inside a function) under `node`, skipping `if TYPE_CHECKING:` bodies."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.orelse:
                yield from _imports(ast.Module(body=[sub], type_ignores=[]), in_function)
        else:
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from _imports(child, nested)


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: dict[str, Path]) -> set[str]:
    """The package modules one import statement in `module` names."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    base = node.module or ""
    if node.level:
        anchor = module.split(".")
        anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
        base = ".".join(anchor + ([base] if base else []))
    found = {base} & modules.keys()
    found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules)
    return found


def build_graph(package_dir: Path) -> Graph:
    """The eager and lazy import edges among the modules of the package at `package_dir`."""
    graph = Graph(module_names(package_dir))
    for module, path in graph.modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        eager, lazy = set(), set()
        for node, in_function in _imports(tree):
            targets = _targets(node, module, path.name == "__init__.py", graph.modules) - {module}
            (lazy if in_function else eager).update(targets)
        graph.eager[module] = eager
        graph.lazy[module] = lazy - eager
    return graph


def _components(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def _cycle_in(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """One shortest cycle through the component's first module, as a path that returns to its start."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(edges.get(node, ()) & members):
                if nxt == start:
                    return paths[node] + [start]
                if nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return component


def cycles(graph: Graph) -> tuple[list[list[str]], list[list[str]]]:
    """(module-level cycles, cycles that need a lazy edge): one example cycle per strongly connected group."""
    eager = [_cycle_in(c, graph.eager) for c in _components(graph.eager)]
    both = {m: graph.eager.get(m, set()) | graph.lazy.get(m, set()) for m in graph.modules}
    eager_groups = {frozenset(c) for c in _components(graph.eager)}
    lazy = [_cycle_in(c, both) for c in _components(both) if frozenset(c) not in eager_groups]
    return eager, lazy


def part_of(module: str, root: str) -> str | None:
    """The part of the package `root` that holds `module` (root.sub.leaf → root.sub); None for root's `__init__`."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == root and len(parts) > 1 else None


def part_edges(graph: Graph, root: str) -> dict[tuple[str, str], list[str]]:
    """(part, part it imports) → the module imports behind that edge ("a.x -> b.y", "~>" for a lazy one)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module in sorted(graph.modules):
        here = part_of(module, root)
        for arrow, targets in (("->", graph.eager.get(module, set())), ("~>", graph.lazy.get(module, set()))):
            for target in sorted(targets):
                there = part_of(target, root)
                if here and there and here != there:
                    edges.setdefault((here, there), []).append(f"{module} {arrow} {target}")
    return edges


def part_cycles(graph: Graph, root: str) -> list[list[str]]:
    """One cycle per strongly connected group of the package's parts (module-level and lazy imports alike)."""
    edges: dict[str, set[str]] = {p: set() for m in graph.modules if (p := part_of(m, root))}
    for here, there in part_edges(graph, root):
        edges[here].add(there)
    return [_cycle_in(c, edges) for c in _components(edges)]


def layers(graph: Graph, root: str) -> list[list[str]]:
    """The parts in layers, lowest first: a part sits one layer above the highest part it imports (acyclic only)."""
    below: dict[str, set[str]] = {p: set() for m in graph.modules if (p := part_of(m, root))}
    for here, there in part_edges(graph, root):
        below[here].add(there)
    level: dict[str, int] = {}

    def height(part: str) -> int:
        if part not in level:
            level[part] = 1 + max((height(p) for p in below[part]), default=-1)
        return level[part]

    for part in below:
        height(part)
    return [sorted(p for p in level if level[p] == n) for n in range(max(level.values(), default=-1) + 1)]


def main(argv: list[str] | None = None) -> int:
    """Print every cycle under the package directory in argv (default ffnbench); 1 if a module-level one or a cycle
    among the package's parts exists."""
    args = sys.argv[1:] if argv is None else argv
    show_layers = "--layers" in args
    args = [a for a in args if a != "--layers"]
    package_dir = Path(args[0] if args else "ffnbench")
    graph = build_graph(package_dir)
    eager, lazy = cycles(graph)
    root = package_dir.resolve().name
    parts = part_cycles(graph, root)
    edges = part_edges(graph, root)
    for cycle in parts:
        print("parts:        " + " -> ".join(cycle))
        for here, there in itertools.pairwise(cycle):
            print(f"                {here} -> {there}: " + "; ".join(edges[here, there][:3])
                  + (f" (+{len(edges[here, there]) - 3} more)" if len(edges[here, there]) > 3 else ""))
    for cycle in eager:
        print("module-level: " + " -> ".join(cycle))
    for cycle in lazy:
        steps = [cycle[0]]
        for here, there in itertools.pairwise(cycle):
            steps.append(("-> " if there in graph.eager[here] else "~> ") + there)
        print("lazy:         " + " ".join(steps))
    if not eager and not lazy and not parts:
        print(f"no import cycles among {len(graph.modules)} modules or among their parts")
    if show_layers and not parts:
        for n, layer in enumerate(layers(graph, root)):
            print(f"layer {n}: " + ", ".join(p.split(".", 1)[1] for p in layer))
    return 1 if eager or parts else 0


if __name__ == "__main__":
    raise SystemExit(main())
