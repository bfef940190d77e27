"""The direction of calls: front doors (API, admin, tasks, commands, sources) call the
services; the services never import a front door, not even inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import memoryhub

PACKAGE = Path(memoryhub.__file__).parent
FRONT_DOORS = (
    "memoryhub.tasks",
    "memoryhub.api",
    "memoryhub.admin",
    "memoryhub.management",
    "memoryhub.mcp",
    "memoryhub.sources",
)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, top-level and function-level, resolved to absolute
    names (``from ..tasks import x`` in ``memoryhub/services/write.py`` is
    ``memoryhub.tasks``)."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0]
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


def test_the_walker_sees_relative_and_function_level_imports(tmp_path):
    services = sorted((PACKAGE / "services").glob("*.py"))
    assert services  # the tree is where this test thinks it is
    seen = imported_modules(PACKAGE / "services" / "maintenance.py")
    assert "memoryhub.services.scheduling.send" in seen
    assert "memoryhub.conf.memoryhub_settings" in seen


def test_no_service_imports_a_front_door():
    offences = []
    for path in sorted((PACKAGE / "services").rglob("*.py")):
        for name in sorted(imported_modules(path)):
            if name.startswith(FRONT_DOORS):
                offences.append(f"{path.name} imports {name}")
    assert offences == [], (
        "services must not import a front door (tasks, api, admin, commands, mcp, sources)"
    )
