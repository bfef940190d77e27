"""The direction of calls: front doors (API, admin, tasks, commands, sources) call the
services; the services never import a front door, not even inside a function; and the
services import each other in one order only (:data:`LAYERS`, lowest first)."""

from __future__ import annotations

from memoryhub.tools import layers
from memoryhub.tools.layers import LAYERS, PACKAGE, imported_modules

FRONT_DOORS = (
    "memoryhub.tasks",
    "memoryhub.api",
    "memoryhub.admin",
    "memoryhub.management",
    "memoryhub.mcp",
    "memoryhub.sources",
)


def test_services_import_only_earlier_layers():
    assert layers.unlisted_services() == [], "place every service in LAYERS"
    assert layers.backward_imports() == [], (
        f"a service imports only services of earlier layers: {LAYERS}"
    )


def test_a_backward_import_is_found(tmp_path, monkeypatch):
    services = tmp_path / "memoryhub" / "services"
    (services / "store").mkdir(parents=True)
    (services / "store" / "__init__.py").write_text("")
    (services / "store" / "locks.py").write_text("def f():\n    from .. import write\n")
    (services / "write.py").write_text("from .store import locks\n")
    monkeypatch.setattr(layers, "PACKAGE", tmp_path / "memoryhub")
    assert layers.backward_imports() == [
        "memoryhub/services/store/locks.py imports memoryhub.services.write (layer 5 from layer 1)"
    ]


def test_the_layers_tool_reports_no_backward_import(capsys):
    assert layers.main([]) == 0
    out = capsys.readouterr().out
    assert "1. store, " in out
    assert "Backward imports: 0" in out
    assert "Function-level imports in memoryhub/: " in out


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
