"""The runnable site's settings: development defaults, production hardening from the
environment, refusing to start misconfigured, the replica alias."""

from __future__ import annotations

import pytest

from tests.site_process import PRODUCTION, manage, run_site, settings_in

# --- settings ------------------------------------------------------------------------------


def test_check_deploy_reports_no_warning_in_production():
    result = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout + result.stderr


def test_development_defaults_are_untouched():
    values = settings_in()
    assert values["DEBUG"] is True
    assert values["SECURE_SSL_REDIRECT"] is False
    assert values["SECURE_HSTS_SECONDS"] == 0
    assert values["SESSION_COOKIE_SECURE"] is False
    assert values["CSRF_COOKIE_SECURE"] is False
    assert values["LOG_FORMAT"] == "text"
    result = manage("check", "--deploy")
    assert result.returncode == 0, result.stderr
    for warning in ("W004", "W008", "W009", "W012", "W016", "W018"):
        assert f"security.{warning}" in result.stderr, warning
    assert "memoryhub.W002" in result.stderr  # no receipt key of its own


def test_production_hardening_is_on_and_tunable_from_the_environment():
    values = settings_in(**PRODUCTION)
    assert values["SECURE_SSL_REDIRECT"] is True
    assert values["SECURE_HSTS_SECONDS"] == 31_536_000
    assert values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is True
    assert values["SECURE_HSTS_PRELOAD"] is True
    assert values["SESSION_COOKIE_SECURE"] is True
    assert values["CSRF_COOKIE_SECURE"] is True
    assert values["SECURE_PROXY_SSL_HEADER"] is None
    assert values["LOG_FORMAT"] == "json"
    tuned = settings_in(
        **PRODUCTION,
        SECURE_HSTS_SECONDS="300",
        SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto",
        LOG_FORMAT="text",
    )
    assert tuned["SECURE_HSTS_SECONDS"] == 300
    assert tuned["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert tuned["LOG_FORMAT"] == "text"


def test_a_reranker_is_configured_from_the_environment():
    assert "RERANKER" not in settings_in()["MEMORYHUB"]  # off by default
    values = settings_in(
        MEMORYHUB_RERANK_BASE_URL="http://tei:8080",
        MEMORYHUB_RERANK_API="tei",
        MEMORYHUB_RERANK_TIMEOUT="2.5",
        MEMORYHUB_RERANK_CANDIDATES="20",
        MEMORYHUB_RERANK_API_KEY="sk-secret",
    )["MEMORYHUB"]
    assert values["RERANKER"] == "memoryhub.rerankers.HttpReranker"
    assert values["RERANKER_OPTIONS"] == {
        "base_url": "http://tei:8080",
        "model": "",
        "api": "tei",
        "timeout": 2.5,
    }
    assert values["RERANK_CANDIDATES"] == 20
    assert "sk-secret" not in str(values)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "0"}, "SECRET_KEY must be set when DEBUG is off."),
        (
            {"MEMORYHUB_RERANK_BASE_URL": "http://x", "MEMORYHUB_RERANK_TIMEOUT": "soon"},
            "MEMORYHUB_RERANK_TIMEOUT must be a number",
        ),
        ({**PRODUCTION, "LOG_FORMAT": "xml"}, "LOG_FORMAT must be json or text"),
        ({**PRODUCTION, "SECURE_HSTS_SECONDS": "a year"}, "SECURE_HSTS_SECONDS must be an"),
    ],
)
def test_production_refuses_to_start_misconfigured(env, message):
    result = run_site("print('started')", **env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr
    assert "started" not in result.stdout


def test_a_replica_url_adds_a_mirrored_alias_and_the_router():
    assert settings_in(**PRODUCTION)["DATABASE_ROUTERS"] == []
    url = "postgres://reader@replica.invalid:5432/memoryhub"
    values = settings_in(**PRODUCTION, REPLICA_DATABASE_URL=url)
    assert values["DATABASE_ROUTERS"] == ["config.routers.ReplicaRouter"]
    assert values["DATABASES"]["replica"]["TEST"]["MIRROR"] == "default"
