"""docker-compose.yml cannot run here (no Docker engine); check it is coherent instead."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_has_the_services_of_the_design():
    services = _compose()["services"]
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(services)
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")
    assert "noeviction" in services["redis"]["command"]
    for name in ("postgres", "redis", "web", "worker"):
        assert "healthcheck" in services[name], name


def test_app_services_are_wired_to_postgres_and_redis():
    services = _compose()["services"]
    for name in ("web", "worker", "beat", "migrate"):
        environment = services[name]["environment"]
        assert environment["DATABASE_URL"].startswith("postgres://")
        assert "@postgres:5432/" in environment["DATABASE_URL"]
        assert environment["CELERY_BROKER_URL"].startswith("redis://redis:6379")
        assert environment["DEBUG"] == "0"
        assert services[name]["build"] == "."


def test_every_command_refers_to_something_in_the_repo():
    services = _compose()["services"]
    assert (ROOT / "Dockerfile").is_file()
    for name, service in services.items():
        command = service.get("command")
        if not command or name in {"postgres", "redis"}:
            continue
        if command[0] == "gunicorn":
            module = command[1].split(":")[0]
            assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), command
            import importlib

            assert hasattr(importlib.import_module(module), command[1].split(":")[1])
        elif command[0] == "celery":
            app_module = command[command.index("-A") + 1]
            assert (ROOT / app_module / "celery.py").is_file(), command
        elif command[:2] == ["python", "manage.py"]:
            assert (ROOT / "manage.py").is_file()
            from django.core.management import get_commands

            assert command[2] in get_commands(), command
        else:
            raise AssertionError(f"{name}: unrecognised command {command}")


def test_dockerfile_copies_what_the_commands_need():
    dockerfile = (ROOT / "Dockerfile").read_text()
    for needed in ("memoryhub", "tenants", "config", "manage.py", "templates"):
        assert f"COPY {needed}" in dockerfile, needed
    assert "'.[server]'" in dockerfile
