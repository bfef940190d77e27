"""The direction of calls: front doors (API, admin, tasks, commands, sources) call the
services; the services never import a front door, not even inside a function."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


# --- tenants stands alone -------------------------------------------------------------------

TENANTS = PACKAGE.parent / "tenants"


def test_tenants_imports_nothing_of_memoryhub():
    """tenants is the reusable tenancy app memoryhub builds on: memoryhub extends its
    admin (``tenants.admin.register_access``, ``extend_admin``), never the other way."""
    offences = [
        f"{path.relative_to(TENANTS.parent)} imports {name}"
        for path in sorted(TENANTS.rglob("*.py"))
        for name in sorted(imported_modules(path))
        if name == "memoryhub" or name.startswith("memoryhub.")
    ]
    offences += [
        f"{path.relative_to(TENANTS.parent)} uses a memoryhub template"
        for path in sorted((TENANTS / "templates").rglob("*.html"))
        if "memoryhub/" in path.read_text()
    ]
    assert offences == []


def test_the_walker_sees_tenants_modules():
    seen = imported_modules(TENANTS / "management" / "commands" / "create_org.py")
    assert "tenants.models.Org" in seen


@pytest.mark.django_db
def test_a_project_with_tenants_and_without_memoryhub_checks_migrates_and_has_its_admin():
    from psycopg import sql

    from .programs import database_url, scratch_database_name, second_connection

    database = scratch_database_name("tenants_only")
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
    with second_connection(autocommit=True) as admin:
        admin.execute(drop)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="tests.tenants_only.settings",
        TENANTS_ONLY_DATABASE_URL=database_url(database),
    )
    try:
        for args in (
            ["django", "check"],
            ["django", "migrate", "--no-input"],
            ["tests.tenants_only.smoke"],
        ):
            completed = subprocess.run(
                [sys.executable, "-m", *args],
                cwd=PACKAGE.parent,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert completed.returncode == 0, (args, completed.stdout + completed.stderr)
        assert "tenants admin OK" in completed.stdout
    finally:
        with second_connection(autocommit=True) as admin:
            admin.execute(drop)


# --- one public path per name ---------------------------------------------------------------

#: The services still share private names among their modules; the store layer
#: (``memoryhub/services/store/``) is where those move, so this check skips services/.
SERVICES = PACKAGE / "services"


def module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    """Whether ``name`` (``memoryhub.services.forget``) is a module of this tree."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def private_imports(path: Path, module: str = "") -> list[str]:
    """The ``_private`` names ``path`` (module ``module``, by default the one its place in
    the tree names) takes from another memoryhub or tenants module: ``from x import
    _name``, and ``x._name`` for a module ``x`` it imported."""
    module = module or module_of(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    modules: dict[str, str] = {}
    found: list[str] = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith(("memoryhub", "tenants")):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{module}:{node.lineno} imports {source}.{alias.name}")
                elif is_module(f"{source}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name.startswith(("memoryhub", "tenants")):
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{module}:{node.lineno} uses {modules[node.value.id]}.{node.attr}")
    return found


def test_the_private_name_walker_sees_imports_and_attributes(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text(
        "from ..services import forget as forget_service\n"
        "from ..scope import Scope, _hidden\n"
        "forget_service._secret(Scope._fields)\n"
    )
    assert private_imports(source, "memoryhub.admin.probe") == [
        "memoryhub.admin.probe:2 imports memoryhub.scope._hidden",
        "memoryhub.admin.probe:3 uses memoryhub.services.forget._secret",
    ]


def test_no_module_takes_a_private_name_from_another():
    offences = [
        offence
        for root in (PACKAGE, TENANTS)
        for path in sorted(root.rglob("*.py"))
        if not path.is_relative_to(SERVICES) and "migrations" not in path.parts
        for offence in private_imports(path)
    ]
    assert offences == [], "a name shared across modules is public: drop its underscore"
