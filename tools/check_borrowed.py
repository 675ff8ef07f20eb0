"""Every borrowed internal of pyiceberg and PySpark lives in its compat module: fail on one elsewhere.

Run by ``make lint``. It reads the source (AST, nothing is imported). pyiceberg's internals may
be used only in ``icemor/_compat/`` and PySpark's (and py4j's) only in
``icemor/engines/spark/_compat/`` (one module per PySpark version range; pyspark may not be
imported by ``icemor._compat``: the import contract). Anywhere else it reports:

- an import of a ``_``-prefixed name or module of pyiceberg, pyspark or py4j;
- an import from their non-public modules (``pyiceberg.avro``, ``pyspark.sql.pandas``) or of
  their non-public names (:data:`NONPUBLIC_NAMES`: ``MANIFEST_ENTRY_SCHEMAS``,
  ``write_manifest_list``, ``SnapshotSummaryCollector``, ...);
- an access ``x._name`` (or ``getattr(x, "_name")``) where ``x`` is a name imported from one
  of them, or where ``_name`` is one of their known private attributes (:data:`PRIVATE_ATTRS`:
  ``_jvm``, ``_jsc``, ``_jdf``, ``_collect_as_arrow``, ``_commit``, ...) whatever ``x`` is;
- a string equal to one of their internal names (:data:`INTERNAL_STRINGS`).

What each compat module borrows, and why, is in its docstring.

Usage: ``python tools/check_borrowed.py [SRC_DIR]`` (default ``src/icemor``); exit 1 on a finding.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PYICEBERG, PYSPARK = "pyiceberg", "pyspark"
# each dependency's top-level packages, and the one place (relative to SRC_DIR) that may borrow
PACKAGES = {"pyiceberg": PYICEBERG, "pyspark": PYSPARK, "py4j": PYSPARK}
COMPAT = {PYICEBERG: "_compat", PYSPARK: "engines/spark/_compat"}
NONPUBLIC_MODULES = ("pyiceberg.avro", "pyspark.sql.pandas")


def _nonpublic_names() -> frozenset[tuple[str, str]]:
    """The public-looking names that the modules of ``icemor._compat.pyiceberg`` list as borrowed
    (each module's ``BORROWED``; no ``_`` part, outside the non-public modules): read from those
    lists, so the two never drift."""
    compat = Path(__file__).resolve().parent.parent / "src" / "icemor" / "_compat" / "pyiceberg"
    borrowed: list[tuple[str, str]] = []
    for path in sorted(compat.glob("*.py")):
        if path.name == "__init__.py":  # its BORROWED gathers the modules' lists
            continue
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == "BORROWED"
                and node.value is not None
            ):
                borrowed.extend(ast.literal_eval(node.value))
    if not borrowed:
        msg = f"no BORROWED list in the modules of {compat}"
        raise SystemExit(msg)
    return frozenset(
        (module, name)
        for module, name in borrowed
        if "." not in name and not name.startswith("_") and not module.startswith(NONPUBLIC_MODULES)
    )


NONPUBLIC_NAMES = _nonpublic_names()

# private attributes of pyiceberg/PySpark objects, found whatever the receiver's name
PRIVATE_ATTRS = {
    **dict.fromkeys(
        (
            "_jvm",
            "_jsc",
            "_jdf",
            "_jconf",
            "_jsparkSession",
            "_jreader",
            "_jwrite",
            "_jcol",
            "_jrdd",
            "_jseq",
            "_jmap",
            "_gateway",
            "_sc",
            "_collect_as_arrow",
        ),
        PYSPARK,
    ),
    **dict.fromkeys(
        ("_commit", "_do_commit", "_write_metadata", "_meta", "_with_partition", "_spec_id"), PYICEBERG
    ),
}
INTERNAL_STRINGS = {"_tmp_metadata_row_index": PYSPARK, "SPARK_HIDE_TRACEBACK": PYSPARK}


def _owner(module: str) -> str | None:
    return PACKAGES.get(module.split(".", 1)[0])


def _private_module(module: str) -> bool:
    parts = module.split(".")
    return any(p.startswith("_") for p in parts) or any(
        module == m or module.startswith(m + ".") for m in NONPUBLIC_MODULES
    )


def check_source(
    source: str, filename: str = "<source>", *, allowed: frozenset[str] = frozenset()
) -> list[str]:
    """The borrowed internals in ``source`` (``file:line: what``); ``allowed``: dependencies it may borrow."""
    tree = ast.parse(source, filename)
    found: list[str] = []
    imported: dict[str, str] = {}  # local name -> dependency, for names bound to their objects

    def report(node: ast.AST, dependency: str, what: str) -> None:
        if dependency not in allowed:
            where = COMPAT[dependency]
            found.append(
                f"{filename}:{getattr(node, 'lineno', 0)}: {what} is a {dependency} internal: use {where}"
            )

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                dependency = _owner(alias.name)
                if dependency is None:
                    continue
                imported[alias.asname or alias.name.split(".", 1)[0]] = dependency
                if _private_module(alias.name):
                    report(node, dependency, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            dependency = _owner(node.module)
            if dependency is None:
                continue
            for alias in node.names:
                imported[alias.asname or alias.name] = dependency
                full = f"{node.module}.{alias.name}"
                if (
                    _private_module(node.module)
                    or alias.name.startswith("_")
                    or _private_module(full)
                    or (node.module, alias.name) in NONPUBLIC_NAMES
                ):
                    report(node, dependency, f"from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        attr: str | None = None
        receiver: ast.expr | None = None
        if isinstance(node, ast.Attribute):
            attr, receiver = node.attr, node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "hasattr", "setattr", "delattr"}
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            attr, receiver = node.args[1].value, node.args[0]
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in INTERNAL_STRINGS
        ):
            report(node, INTERNAL_STRINGS[node.value], repr(node.value))
            continue
        if attr is None or not attr.startswith("_") or attr.startswith("__"):
            continue
        if attr in PRIVATE_ATTRS:
            report(node, PRIVATE_ATTRS[attr], f".{attr}")
        elif isinstance(receiver, ast.Name) and receiver.id in imported:
            report(node, imported[receiver.id], f"{receiver.id}.{attr}")
    return found


def _allowed(path: Path, src: Path) -> frozenset[str]:
    relative = path.relative_to(src).as_posix()
    return frozenset(
        dependency
        for dependency, place in COMPAT.items()
        if relative in (place, f"{place}.py") or relative.startswith(place + "/")
    )


def check_tree(src: Path) -> list[str]:
    """The borrowed internals in every module under ``src`` outside the compat modules."""
    found = []
    for path in sorted(src.rglob("*.py")):
        found.extend(check_source(path.read_text(encoding="utf-8"), str(path), allowed=_allowed(path, src)))
    return found


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "src" / "icemor"
    found = check_tree(src)
    for line in found:
        print(line)
    if found:
        print(
            f"{len(found)} borrowed internal(s) outside the compat modules: move each behind a function there"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
