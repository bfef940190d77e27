"""The runnable site in a fresh process: run code after ``django.setup()``, a management
command, or read the settings a given environment produces (the deploy-time tests)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

from .programs import ROOT

STRONG_KEY = secrets.token_urlsafe(50)


def run_site(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` after ``django.setup()`` in a fresh process whose only env is ``env``."""
    environment = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **env}
    environment.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    script = "import django, json\ndjango.setup()\nfrom django.conf import settings\n" + code
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    code = f"from django.core.management import call_command\ncall_command(*{list(args)!r})"
    return run_site(code, **env)


#: A production environment: no database is contacted by ``check``.
PRODUCTION = {
    "DEBUG": "0",
    "SECRET_KEY": STRONG_KEY,
    "MEMORYHUB_ERASURE_RECEIPT_KEY": STRONG_KEY[::-1],
    "ALLOWED_HOSTS": "memory.example.com",
    "DATABASE_URL": "postgres://memoryhub@db.invalid:5432/memoryhub",
}


def settings_in(**env: str) -> dict[str, object]:
    names = [
        "DEBUG",
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SECURE_HSTS_PRELOAD",
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_PROXY_SSL_HEADER",
        "LOG_FORMAT",
        "DATABASE_ROUTERS",
        "MEMORYHUB",
    ]
    code = (
        f"values = {{name: getattr(settings, name, None) for name in {names!r}}}\n"
        "values['DATABASES'] = {alias: {'TEST': db.get('TEST', {})}"
        " for alias, db in settings.DATABASES.items()}\n"
        "print(json.dumps(values))"
    )
    result = run_site(code, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])
