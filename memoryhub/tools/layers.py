"""The services' layers: which service may import which.

The services form one strict order, :data:`LAYERS`, lowest first: a service imports only
services of earlier layers (the store at the bottom; the sweep, the home page and the
health check at the top), never one of its own layer or a later one, not even inside a
function. import-linter enforces it: :func:`contracts` writes the order, with the rule
that no service imports a front door and that ``tenants`` imports nothing of memoryhub,
as import-linter's contracts, and ``tests/project/test_architecture.py`` runs
``lint-imports`` on them. ``python -m memoryhub.tools.layers`` prints the order and how
many imports in ``memoryhub/`` are made inside a function (each one either defers an
optional or heavy dependency, or hides a circle this order forbids);
``--contracts`` prints the contracts.

Nothing here imports Django: the code is read, not run.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FRONT_DOORS",
    "LAYERS",
    "MOVED",
    "PACKAGE",
    "FunctionImport",
    "contracts",
    "function_level_imports",
    "imported_modules",
    "main",
]

#: The ``memoryhub`` package directory.
PACKAGE = Path(__file__).resolve().parent.parent
SERVICES = "memoryhub.services"

#: The services (modules and packages of ``memoryhub/services/``), lowest layer first.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("dispatch",),
    ("store", "records", "record_indexes", "knowledge_bases"),
    ("filter_indexes", "word_statistics", "history", "distribution", "idempotency"),
    ("vector_indexes",),
    ("indexing", "supersession"),
    ("write", "query"),
    ("updates", "imports"),
    ("forget",),
    ("consolidation", "archives"),
    ("subjects",),
    ("maintenance", "overview", "health"),
)


#: Names that moved up a layer, still answered (with a ``DeprecationWarning``) by the
#: service they left: (that service, the one it now imports for them). Each goes at the
#: release its warning names.
MOVED: frozenset[tuple[str, str]] = frozenset(
    {("memoryhub.services.write", "memoryhub.services.updates")}
)


def module_name(path: Path) -> str:
    """The dotted name of the module at ``path`` (a package's ``__init__`` is the
    package)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, top-level and function-level, resolved to absolute
    names (``from ..tasks import x`` in ``memoryhub/services/write.py`` is
    ``memoryhub.tasks``; the imported name itself is listed too, ``memoryhub.tasks.x``,
    since it may be a module)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            found.add(prefix)
            found.update(f"{prefix}.{alias.name}" for alias in node.names)
    return found


#: The modules that call the services: a service imports none of them.
FRONT_DOORS = (
    "memoryhub.tasks",
    "memoryhub.api",
    "memoryhub.admin",
    "memoryhub.management",
    "memoryhub.mcp",
    "memoryhub.sources",
    "memoryhub.integrations",
    "memoryhub.probes",
)


def contracts() -> str:
    """import-linter's contracts (INI): the services' layers (highest first, siblings
    independent, every service placed), the front doors no service imports, and
    ``tenants`` standing alone."""
    layers = "".join(f"    {' | '.join(layer)}\n" for layer in reversed(LAYERS))
    moved = "".join(f"    {service} -> {target}\n" for service, target in sorted(MOVED))
    doors = "".join(f"    {door}\n" for door in FRONT_DOORS)
    return (
        "[importlinter]\nroot_packages =\n    memoryhub\n    tenants\n\n"
        "[importlinter:contract:service-layers]\n"
        "name = A service imports only services of earlier layers\n"
        f"type = layers\ncontainers =\n    {SERVICES}\nexhaustive = true\n"
        f"layers =\n{layers}"
        + (f"ignore_imports =\n{moved}" if moved else "")
        + "\n[importlinter:contract:front-doors]\n"
        "name = No service imports a front door\n"
        f"type = forbidden\nsource_modules =\n    {SERVICES}\nforbidden_modules =\n{doors}"
        "\n[importlinter:contract:tenants-alone]\n"
        "name = tenants imports nothing of memoryhub\n"
        "type = forbidden\nsource_modules =\n    tenants\nforbidden_modules =\n    memoryhub\n"
    )


@dataclass(frozen=True, slots=True)
class FunctionImport:
    path: str
    line: int
    statement: str


def function_level_imports(root: Path = PACKAGE) -> list[FunctionImport]:
    """The import statements made inside a function body in ``root`` (migrations
    aside)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in _own_body(function):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found.append(
                        FunctionImport(
                            str(path.relative_to(root.parent)), node.lineno, ast.unparse(node)
                        )
                    )
    return sorted(found, key=lambda found: (found.path, found.line))


def _own_body(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The nodes of ``function``'s body, not those of functions nested in it (they are
    walked on their own)."""
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            pending.extend(ast.iter_child_nodes(node))


def main(argv: list[str] | None = None) -> int:
    """Print the layers and the function-level imports (``--contracts``: import-linter's
    contracts instead)."""
    arguments = argv if argv is not None else sys.argv[1:]
    if "--contracts" in arguments:
        print(contracts(), end="")
        return 0
    print("Service layers, lowest first:")
    for number, layer in enumerate(LAYERS, start=1):
        print(f"  {number}. {', '.join(layer)}")
    imports = function_level_imports()
    print(f"Function-level imports in memoryhub/: {len(imports)}")
    if "--verbose" in arguments:
        for found in imports:
            print(f"  {found.path}:{found.line}: {found.statement}")
    print("Check the imports: lint-imports (the contracts: --contracts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
