"""No import cycle among the modules of ``src/icemor``: fail on any, function-local imports included.

Run by ``make lint``. import-linter's layer contract cannot see a cycle inside one layer, and a
cycle hidden by an import inside a function is still a cycle: it only moves the failure from
import time to the first call. This tool reads the source (AST, nothing is imported) and takes
every ``import`` and ``from ... import`` of an icemor module wherever it stands: module level,
inside functions, methods, ``try`` and ``if TYPE_CHECKING:`` (a type-only cycle still ties two
modules together: neither can be read, moved or tested without the other). Relative imports are
resolved; ``from pkg import name`` imports ``pkg.name`` when that is a module, else ``pkg``. The
implicit import of a module's parent packages is not an edge (Python runs a package's
``__init__`` before its modules, whatever they import).

Each strongly connected component of the graph with more than one module is reported as one
cycle through it, each step as ``file:line``.

Usage: ``python tools/check_import_cycles.py [SRC_DIR]`` (default ``src/icemor``); exit 1 on a cycle.
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections import deque
from pathlib import Path

# An edge: (importer, imported) -> the line of the first import statement that makes it.
Edges = dict[tuple[str, str], int]


def module_names(src: Path) -> dict[str, Path]:
    """Every module under the package directory ``src``, by dotted name (``pkg/__init__.py`` is ``pkg``)."""
    package = src.name
    modules = {}
    for path in sorted(src.rglob("*.py")):
        parts = [package, *path.relative_to(src).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` is, or the innermost package or module containing it (None: not ours)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _base(statement: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module a ``from`` import reads from (relative levels resolved)."""
    if statement.level == 0:
        return statement.module or ""
    parts = importer.split(".")
    # `from . import x` in a package's __init__ is relative to the package itself
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (statement.level - 1)]
    return ".".join([*anchor, statement.module] if statement.module else anchor)


def import_edges(modules: dict[str, Path]) -> Edges:
    """The imports between ``modules``: (importer, imported) -> first line."""
    edges: Edges = {}
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        for statement in ast.walk(tree):
            if isinstance(statement, ast.Import):
                targets = [_owner(alias.name, modules) for alias in statement.names]
            elif isinstance(statement, ast.ImportFrom):
                base = _base(statement, importer, is_package)
                targets = [
                    _owner(f"{base}.{alias.name}", modules) if alias.name != "*" else _owner(base, modules)
                    for alias in statement.names
                ]
            else:
                continue
            for imported in targets:
                if imported is None or imported == importer:
                    continue
                key = (importer, imported)
                edges[key] = min(edges.get(key, statement.lineno), statement.lineno)
    return edges


def _components(nodes: list[str], edges: Edges) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan's algorithm, iterative)."""
    out_of: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in sorted(edges):
        out_of[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(out_of[node]):
                work.append((node, i + 1))
                nxt = out_of[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _cycle_through(start: str, members: set[str], edges: Edges) -> list[str]:
    """A shortest cycle from ``start`` back to it inside one component: ``[start, ..., start]``."""
    out_of: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        if a in members and b in members:
            out_of.setdefault(a, []).append(b)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in out_of.get(node, []):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    msg = f"{start} is in no cycle"
    raise ValueError(msg)


def find_cycles(src: Path) -> list[str]:
    """One line per import cycle among the modules of the package directory ``src``."""
    modules = module_names(src)
    edges = import_edges(modules)
    lines = []
    for component in _components(sorted(modules), edges):
        cycle = _cycle_through(component[0], set(component), edges)
        steps = [
            f"{a} ({modules[a].relative_to(src.parent)}:{edges[a, b]})" for a, b in itertools.pairwise(cycle)
        ]
        line = "import cycle: " + " -> ".join([*steps, cycle[-1]])
        if len(component) > len(cycle) - 1:  # more modules are tangled than this one loop shows
            line += f" (tangled with it: {', '.join(m for m in component if m not in cycle)})"
        lines.append(line)
    return lines


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "src" / "icemor"
    found = find_cycles(src)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} import cycle(s) in {src}: move what both sides need into a module below them")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
