"""docker-compose.yml cannot run here (no Docker engine); check it is coherent instead."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


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


def test_worker_acknowledges_late_and_gives_back_tasks_of_a_lost_worker(settings):
    services = _compose()["services"]
    command = services["worker"]["command"]
    assert command[:3] == ["celery", "-A", "config"]
    assert "worker" in command
    assert settings.CELERY_TASK_ACKS_LATE is True
    assert settings.CELERY_TASK_REJECT_ON_WORKER_LOST is True
    assert settings.CELERY_WORKER_PREFETCH_MULTIPLIER == 1
    from memoryhub.tasks import index_records

    assert index_records.acks_late is True
    assert index_records.reject_on_worker_lost is True


def test_workers_scale_with_compose_scale():
    services = _compose()["services"]
    text = (ROOT / "docker-compose.yml").read_text()
    assert "docker compose up -d --scale worker=" in text
    # A fixed container name or host port would make a second replica fail to start.
    for name in ("worker", "beat"):
        assert "container_name" not in services[name], name
        assert "ports" not in services[name], name
    assert "beat" in services["beat"]["command"]


def test_redis_never_evicts_broker_messages():
    command = _compose()["services"]["redis"]["command"]
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"


def test_secrets_have_no_defaults():
    services = _compose()["services"]
    app = services["web"]["environment"]
    assert app["SECRET_KEY"] == "${SECRET_KEY:?set SECRET_KEY}"
    assert "${POSTGRES_PASSWORD:?" in app["DATABASE_URL"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith(
        "${POSTGRES_PASSWORD:?"
    )
    for name, service in services.items():
        for variable, value in (service.get("environment") or {}).items():
            if any(word in variable for word in ("SECRET", "PASSWORD")):
                assert ":-" not in str(value), f"{name}.{variable} has a default"


def test_web_logs_json_lines_through_the_site_not_gunicorn():
    services = _compose()["services"]
    web = services["web"]["command"]
    assert web[:2] == ["gunicorn", "config.wsgi:application"]
    # --preload: the site's LOGGING is in place before gunicorn logs; gunicorn's access
    # log would write plain lines with query strings (namespaces) in them.
    assert "--preload" in web
    assert not any(option.startswith("--access-log") for option in web)
    for name in ("worker", "beat"):
        command = services[name]["command"]
        assert command.index("--quiet") < command.index(name)
    for name in ("web", "worker", "beat", "migrate"):
        assert services[name]["environment"]["LOG_FORMAT"] == "json"
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = next(line for line in dockerfile.splitlines() if line.startswith("CMD "))
    assert json.loads(cmd.removeprefix("CMD ")) == web


def test_the_health_probe_is_exempt_from_the_https_redirect(settings):
    import re

    probe = " ".join(_compose()["services"]["web"]["healthcheck"]["test"])
    path = re.search(r"http://127\.0\.0\.1:8000/([^'\"]+)", probe)
    assert path is not None
    assert any(re.search(pattern, path.group(1)) for pattern in settings.SECURE_REDIRECT_EXEMPT)


def test_a_read_replica_can_be_switched_on_from_the_environment():
    services = _compose()["services"]
    for name in ("web", "worker", "beat"):
        assert services[name]["environment"]["REPLICA_DATABASE_URL"] == (
            "${REPLICA_DATABASE_URL:-}"
        )
    assert (ROOT / "config" / "routers.py").is_file()
