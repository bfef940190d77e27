"""The direction of calls: front doors (API, admin, tasks, commands, sources) call the
services; the services never import a front door, not even inside a function; and the
services import each other in one order only (:data:`LAYERS`, lowest first)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memoryhub.tools import layers
from memoryhub.tools.layers import PACKAGE, imported_modules


def lint_imports(root: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """import-linter on the packages under ``root``, with the contracts of
    :func:`memoryhub.tools.layers.contracts`."""
    config = tmp_path / "contracts.ini"
    config.write_text(layers.contracts())
    return subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), str(config), "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy_of_the_tree(tmp_path: Path) -> Path:
    """memoryhub and tenants, copied to ``tmp_path / "tree"`` to be broken there."""
    tree = tmp_path / "tree"
    for package in ("memoryhub", "tenants"):
        shutil.copytree(
            PACKAGE.parent / package, tree / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return tree


def test_the_import_contracts_are_kept(tmp_path):
    """The services' layers (every service placed, none importing its own layer or a
    later one, not even in a function), no service importing a front door, tenants
    importing nothing of memoryhub: import-linter keeps all three."""
    checked = lint_imports(PACKAGE.parent, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Contracts: 3 kept, 0 broken." in checked.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # A backward import, inside a function: the store importing a use case.
        ("services/store/locks.py", "def f():\n    from .. import write\n", "earlier layers"),
        # Two services of one layer.
        ("services/query/__init__.py", "from .. import write\n", "earlier layers"),
        ("services/records.py", "from ..api import views\n", "front door"),
        ("../tenants/models.py", "import memoryhub.scope\n", "tenants imports nothing"),
    ],
)
def test_each_contract_breaks_on_its_import(tmp_path, module, line, contract):
    tree = _copy_of_the_tree(tmp_path)
    target = tree / "memoryhub" / module
    target.write_text(target.read_text() + "\n" + line)
    checked = lint_imports(tree, tmp_path)
    assert checked.returncode == 1, checked.stdout
    broken = [row for row in checked.stdout.splitlines() if " BROKEN" in row]
    assert any(contract in row for row in broken), checked.stdout


def test_every_service_is_placed_in_a_layer(tmp_path):
    tree = _copy_of_the_tree(tmp_path)
    (tree / "memoryhub" / "services" / "newcomer.py").write_text("")
    checked = lint_imports(tree, tmp_path)
    assert checked.returncode != 0 and "newcomer" in checked.stdout + checked.stderr


def test_the_layers_tool_prints_the_order_and_the_contracts(capsys):
    assert layers.main([]) == 0
    out = capsys.readouterr().out
    assert "1. dispatch" in out and "2. store, " in out
    assert "Function-level imports in memoryhub/: " in out
    assert layers.main(["--contracts"]) == 0
    assert capsys.readouterr().out == layers.contracts()


def test_the_walker_sees_relative_and_function_level_imports(tmp_path):
    services = sorted((PACKAGE / "services").glob("*.py"))
    assert services  # the tree is where this test thinks it is
    seen = imported_modules(PACKAGE / "services" / "maintenance.py")
    assert "memoryhub.services.dispatch.send" in seen
    assert "memoryhub.conf.memoryhub_settings" in seen


# --- tenants stands alone -------------------------------------------------------------------

TENANTS = PACKAGE.parent / "tenants"


def test_tenants_uses_no_template_of_memoryhub():
    """tenants is the reusable tenancy app memoryhub builds on: memoryhub extends its
    admin (``tenants.admin.register_access``, ``extend_admin``), never the other way."""
    # Its imports: import-linter's tenants-alone contract (above). Its templates:
    offences = [
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

    from tests.programs import database_url, scratch_database_name, second_connection

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
        if "migrations" not in path.parts
        for offence in private_imports(path)
    ]
    assert offences == [], "a name shared across modules is public: drop its underscore"


def resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` statement of ``module`` reads."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def path_of(module: str) -> Path:
    path = PACKAGE.parent.joinpath(*module.split("."))
    return path / "__init__.py" if (path / "__init__.py").is_file() else path.with_suffix(".py")


def borrowed_names(module: str) -> dict[str, str]:
    """``{name: where from}`` of the names ``module`` imports at its top level: they are
    its own to use, not a second place to import them from."""
    path = path_of(module)
    borrowed: dict[str, str] = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.ImportFrom):
            source = resolve_from(module, path.name == "__init__.py", node)
            for alias in node.names:
                borrowed[alias.asname or alias.name] = source
    return borrowed


def second_paths(path: Path, module: str = "") -> list[str]:
    """The names ``path`` takes from a memoryhub or tenants module other than the one
    that defines them. A package's ``__init__`` that re-exports a name of its own
    submodule is the name's one path (``memoryhub.embedders.HashingEmbedder``): from
    outside the package, the submodule is not."""
    module = module or module_of(path)
    is_package = path.name == "__init__.py"
    found: list[str] = []
    used: list[tuple[int, str, str]] = []  # (line, module, name)
    modules: dict[str, str] = {}
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = resolve_from(module, is_package, node)
            if not source.startswith(("memoryhub", "tenants")) or not is_module(source):
                continue
            for alias in node.names:
                if is_module(f"{source}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{source}.{alias.name}"
                else:
                    used.append((node.lineno, source, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name.startswith(("memoryhub", "tenants")):
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
        ):
            used.append((node.lineno, modules[node.value.id], node.attr))
    for line, source, name in used:
        origin = borrowed_names(source).get(name)
        reexport = path_of(source).name == "__init__.py" and (origin or "").startswith(f"{source}.")
        if origin is not None and not reexport and source != module:
            found.append(f"{module}:{line} takes {source}.{name} (from {origin})")
        package = source.rsplit(".", 1)[0]
        outside = module != package and not module.startswith(f"{package}.")
        if outside and borrowed_names(package).get(name, "").startswith(f"{package}."):
            found.append(f"{module}:{line} takes {source}.{name} (its path: {package}.{name})")
    return found


def test_the_second_path_walker_sees_borrowed_and_package_names(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text(
        "from ..embedders.hashing import HashingEmbedder\n"
        "from ..mcp import tools\n"
        "from ..exceptions import WriteRefused\n"
        "from ..embedders import HashingEmbedder as Same\n"
        "tools.ValidationFailed, tools.call\n"
    )
    assert second_paths(source, "memoryhub.admin.probe") == [
        "memoryhub.admin.probe:1 takes memoryhub.embedders.hashing.HashingEmbedder"
        " (its path: memoryhub.embedders.HashingEmbedder)",
        "memoryhub.admin.probe:5 takes memoryhub.mcp.tools.ValidationFailed"
        " (from memoryhub.exceptions)",
    ]


def test_every_name_is_taken_from_its_one_path():
    offences = [
        offence
        for root in (PACKAGE, TENANTS)
        for path in sorted(root.rglob("*.py"))
        if "migrations" not in path.parts
        for offence in second_paths(path)
    ]
    assert offences == [], "import a name from the module that defines it (or its package)"


def foreign_exports(path: Path, module: str = "") -> list[str]:
    """The names ``path``'s ``__all__`` lists that it only imports from elsewhere (a
    package may list its own submodules' names; another module's are not its to offer)."""
    module = module or module_of(path)
    tree = ast.parse(path.read_text(), str(path))
    exported: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            exported = list(ast.literal_eval(node.value))
    borrowed: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            source = resolve_from(module, path.name == "__init__.py", node)
            for alias in node.names:
                borrowed[alias.asname or alias.name] = source
    own = f"{module}." if path.name == "__init__.py" else "\0"
    return [
        f"{module} offers {name} (from {borrowed[name]})"
        for name in exported
        if name in borrowed and not borrowed[name].startswith(own)
    ]


def test_the_export_walker_sees_a_foreign_name(tmp_path):
    package = tmp_path / "__init__.py"
    package.write_text(
        "from ..items import MemoryItem\nfrom .base import MemorySource\n"
        "__all__ = ['MemoryItem', 'MemorySource']\n"
    )
    assert foreign_exports(package, "memoryhub.sources") == [
        "memoryhub.sources offers MemoryItem (from memoryhub.items)"
    ]


def test_public_name_lists_offer_only_their_own_names():
    offences = [
        offence
        for root in (PACKAGE, TENANTS)
        for path in sorted(root.rglob("*.py"))
        for offence in foreign_exports(path)
    ]
    assert offences == [], "a name has one public path: the module that defines it"
