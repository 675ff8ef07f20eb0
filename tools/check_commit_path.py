"""Every catalog commit goes through one door in ``src/icemor/commit/``: fail on any other.

Run by ``make lint``. It reads the source (AST, nothing is imported) and reports:

- anywhere, ``commit/`` included: a ``commit_table`` call site unless it is the only one in the
  tree (``icemor.commit.door``: one retry loop, one outcome classification, one retention), and
  no call site at all; a call of pyiceberg's own commit paths (``commit_transaction``,
  ``_do_commit``); a ``with`` block on a pyiceberg update or transaction, which commits on exit.

Outside ``icemor/commit/`` it also reports:

- a call of a method that commits or stages a metadata change whatever its receiver:
  ``commit_table``, ``transaction``, ``update_schema``, ``update_spec``, ``update_snapshot``,
  ``new_snapshot``, ...;
- a call of a committing method of a pyiceberg ``Table`` (``append``, ``overwrite``,
  ``delete``, ``add_files``, ...) on a name bound to one: a parameter or variable annotated with
  pyiceberg's ``Table`` (also as ``PyIcebergTable``), or assigned from a call of it. ``list.append``
  and icemor's own ``Table`` are not pyiceberg tables, so they are not reported.

Usage: ``python tools/check_commit_path.py [SRC_DIR]`` (default ``src/icemor``); exit 1 on a finding.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

# methods that commit (or stage a commit) whatever object they are called on
ANY_RECEIVER = frozenset(
    {
        "commit_table",
        "_do_commit",
        "transaction",
        "update_schema",
        "update_spec",
        "update_sort_order",
        "update_snapshot",
        "manage_snapshots",
        "update_statistics",
        "new_snapshot",
        "fast_append",
        "merge_append",
    }
)
# methods that commit through pyiceberg's own path (its retries, its cleanup), bypassing the door
PYICEBERG_COMMIT_PATHS = frozenset({"commit_transaction", "_do_commit"})
# pyiceberg's updates and transactions commit when their ``with`` block exits
COMMIT_ON_EXIT = ANY_RECEIVER - {"commit_table", "_do_commit", "new_snapshot"}
# methods of pyiceberg's Table that commit a snapshot
TABLE_METHODS = frozenset(
    {
        "append",
        "overwrite",
        "delete",
        "dynamic_partition_overwrite",
        "upsert",
        "add_files",
    }
)


def _pyiceberg_table_names(tree: ast.Module) -> set[str]:
    """Local names of pyiceberg's ``Table`` class in this module (``Table``, ``PyIcebergTable``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "pyiceberg.table":
            names.update(a.asname or a.name for a in node.names if a.name == "Table")
    return names


def _mentions(annotation: ast.expr | None, classes: set[str]) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    return any(isinstance(n, ast.Name) and n.id in classes for n in ast.walk(annotation))


def _table_variables(tree: ast.Module, classes: set[str]) -> set[str]:
    """Names bound to a pyiceberg Table: annotated with it, or assigned from ``Table(...)``."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and _mentions(node.annotation, classes):
            out.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if _mentions(node.annotation, classes):
                out.add(node.target.id)
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id in classes
        ):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def _call_name(node: ast.expr) -> str | None:
    """The method name of ``x.name(...)``, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def commit_table_calls(source: str, filename: str = "<source>") -> list[str]:
    """The ``commit_table`` call sites in ``source`` (``file:line``)."""
    tree = ast.parse(source, filename)
    return [
        f"{filename}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _call_name(node) == "commit_table"
    ]


def check_everywhere(source: str, filename: str = "<source>") -> list[str]:
    """The calls in ``source`` that commit around the door, in any module (``commit/`` too)."""
    tree = ast.parse(source, filename)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) in PYICEBERG_COMMIT_PATHS:
            found.append(f"{filename}:{node.lineno}: .{_call_name(node)}() commits around icemor.commit.door")
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                method = _call_name(item.context_expr)
                if method in COMMIT_ON_EXIT:
                    found.append(
                        f"{filename}:{node.lineno}: `with ....{method}()` commits on exit, "
                        "around icemor.commit.door"
                    )
    return found


def check_source(source: str, filename: str = "<source>") -> list[str]:
    """The commit calls in ``source`` (``file:line: what``), for a module outside ``commit/``."""
    tree = ast.parse(source, filename)
    classes = _pyiceberg_table_names(tree)
    tables = _table_variables(tree, classes) if classes else set()
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        method = node.func.attr
        receiver = node.func.value
        if method in ANY_RECEIVER:
            found.append(f"{filename}:{node.lineno}: .{method}() commits outside icemor.commit")
        elif method in TABLE_METHODS and isinstance(receiver, ast.Name) and receiver.id in tables:
            found.append(
                f"{filename}:{node.lineno}: {receiver.id}.{method}() commits a pyiceberg table "
                "outside icemor.commit"
            )
    return found


def check_tree(src: Path) -> list[str]:
    """The commits around the door in every module under ``src``, and the ``commit_table`` call
    sites when there is not exactly one."""
    found = []
    sites = []
    for path in sorted(src.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        sites.extend(commit_table_calls(source, str(path)))
        found.extend(check_everywhere(source, str(path)))
        if (src / "commit") not in path.parents:
            found.extend(check_source(source, str(path)))
    if len(sites) != 1:
        where = ", ".join(sites) if sites else "none"
        found.append(f"{len(sites)} commit_table call sites ({where}): icemor calls it in one place only")
    return found


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "src" / "icemor"
    found = check_tree(src)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} commit path problem(s) in {src}: every commit goes through icemor.commit.door")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
