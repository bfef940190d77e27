"""The how-to "Embed memoryhub in an existing project" (docs/how-to/embed.md), followed
step by step: a new ``startproject`` site gets the marked blocks pasted in, migrates on
the embedded backend, makes an org, a domain and a key with the documented commands, and
calls the API. A change to the guide that breaks it breaks this test."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "how-to" / "embed.md"


def block(name: str) -> str:
    """The code block after ``<!-- guide:name -->`` in the guide, unindented."""
    guide = GUIDE.read_text()
    match = re.search(rf"<!-- guide:{name} -->\s*```\w*\n(.*?)```", guide, re.S)
    assert match is not None, f"{GUIDE.relative_to(ROOT)} has no guide:{name} block"
    lines = match.group(1).splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines) + "\n"


def test_the_embedding_guide_works_when_pasted(tmp_path: Path) -> None:
    from memoryhub.contrib.embedded_postgres import server as embedded

    env = {
        k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "DATABASE_URL"}
    }
    site = tmp_path / "mysite"
    site.mkdir()

    def run(*argv: str) -> str:
        done = subprocess.run(
            [sys.executable, *argv], cwd=site, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    run("-m", "django", "startproject", "mysite", ".")
    with (site / "mysite" / "settings.py").open("a") as settings:
        settings.write("\n" + block("settings"))
    with (site / "mysite" / "urls.py").open("a") as urls:
        urls.write("\n" + block("urls"))
    try:
        run("manage.py", "migrate")
        key = ""
        for line in block("shell").splitlines():
            argv = shlex.split(line.split("#")[0])
            if not argv:
                continue
            assert argv[:2] == ["python", "manage.py"], line
            key = (run(*argv[1:]).strip().splitlines() or [""])[-1]
        called = run(
            "manage.py",
            "shell",
            "-c",
            "from django.test import Client\n"
            f"r = Client().get('/memory/api/v1/whoami', HTTP_AUTHORIZATION='Api-Key {key}',"
            " HTTP_HOST='localhost')\n"
            "print(r.status_code, r.json()['org'], sorted(r.json()['permissions']))",
        )
        assert called.strip().splitlines()[-1] == "200 acme ['read', 'write']"
    finally:
        embedded.stop(site / ".db" / "postgres")
