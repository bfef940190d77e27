"""The how-to pages (docs/how-to/) followed as written on a fresh ``make run``.

Every shell and Python block of every how-to runs here, page after page in one shell
(so ``KEY`` carries from the block that makes it to the blocks that use it), or
:data:`NOT_RUN` names where it is exercised instead or why it cannot be; a new block is
one or the other. A shell block's ``# {...}`` comments are the answers it must give; a
Python expression followed by a literal in a comment must equal it. Between pages the
demo domain's ``memory`` is erased, as a reader starting that page on a fresh site has
it; the curated handbook stays.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests import docs_blocks
from tests.make_run_site import Site
from tests.programs import ROOT, wait_for

HOWTOS = sorted((ROOT / "docs" / "how-to").glob("*.md"))

_INSTALL = (
    "an install line: tests/project/test_install.py builds the wheel and installs it, and"
    " the extras the docs name, into a clean virtualenv"
)
_HOSTED = "needs a hosted model and its key; the page's --offline run takes the same path"
_CITUS = "builds and runs a Citus cluster: tests/citus runs these commands on one of its own"

#: (page, the block's first line begins with) → why it does not run here.
NOT_RUN: dict[tuple[str, str], str] = {
    ("install.md", "git clone"): _INSTALL,
    ("install.md", "pip install django-memoryhub "): _INSTALL,
    ("install.md", 'pip install --no-deps "dist/'): _INSTALL,
    ("anthropic-memory-tool.md", 'pip install "django-memoryhub[anthropic]"'): _INSTALL,
    ("langgraph-store.md", 'pip install "django-memoryhub[langgraph]"'): _INSTALL,
    ("openai-agents-session.md", 'pip install "django-memoryhub[openai-agents]"'): _INSTALL,
    ("rest-api.md", "pip install --no-deps django-memoryhub"): _INSTALL,
    ("anthropic-memory-tool.md", "import anthropic"): _HOSTED,
    ("openai-agents-session.md", "from agents import Agent, Runner"): _HOSTED,
    ("openai-agents-session.md", "MEMORYHUB_API_KEY=$KEY OPENAI_API_KEY=sk-"): _HOSTED,
    ("erase.md", "curl"): (
        "an illustration whose counts depend on what the namespace holds; the REST tour"
        " (rest-api.md) sends the same requests and checks their answers"
    ),
    ("embed.md", "from memoryhub.testing import"): (
        "a test for the host project's own suite: tests/sources/test_testing_helpers.py"
        " runs these fixtures"
    ),
    ("embedders.md", "MEMORYHUB = {"): (
        "a settings fragment: benchmarks/quality.py measures these settings (minilm-turns)"
    ),
    ("production.md", "export SECRET_KEY"): (
        "Docker Compose, which this machine lacks: tests/deploy/test_compose.py checks the"
        " compose file and its commands"
    ),
    ("production.md", "export DATABASE_URL"): (
        "needs a PostgreSQL and a Redis of one's own: the make run tests start those servers"
    ),
    ("production.md", "export OTEL_EXPORTER_OTLP_ENDPOINT"): (
        "names a collector this machine does not run: tests/workers/test_tracing.py exports"
        " to a receiver of its own"
    ),
    ("workers.md", "CELERY_BROKER_URL=redis://127.0.0.1:"): (
        "names the default Redis port, which no test may touch: tests/deploy/"
        "test_make_worker.py runs the worker that joins make run"
    ),
    ("migrate.md", ".venv/bin/python manage.py memoryhub_import_from langgraph-postgres"): (
        "needs a peer's store: tests/integrations/test_importers.py writes a PostgresStore and"
        " an SQLiteSession database with the real libraries and imports them"
    ),
    ("citus.md", ".venv/bin/python -m memoryhub.contrib.citus_cluster up"): _CITUS,
    ("citus.md", "python manage.py migrate"): _CITUS,
    ("citus.md", "python manage.py memoryhub_citus where"): _CITUS,
}

_DJANGO = """
import os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django
django.setup()
"""
_DOMAIN = (
    _DJANGO
    + """
from tenants.models import Domain
domain = Domain.objects.get(org__slug="demo", slug="support")
"""
)
_HTTP_STORE = """
from memoryhub.client import SyncHttpMemoryStore
store = SyncHttpMemoryStore(URL, api_key=KEY, domain="support")
"""

#: (page, first line begins with) → what the page's text (or a block not run here)
#: gives the reader before the block: the names it uses without defining them.
PRELUDES: dict[tuple[str, str], str] = {
    ("anthropic-memory-tool.md", "[version.value"): _HTTP_STORE,
    ("anthropic-memory-tool.md", "store.forget"): _HTTP_STORE,
    ("access.md", "from memoryhub.services.subjects"): _DJANGO,
    ("archives.md", "import tempfile"): _DJANGO,
    ("erase.md", "from memoryhub import policy"): _DJANGO,
    ("langgraph-store.md", "from memoryhub.integrations.langgraph.django"): _DOMAIN,
    ("mcp.md", "urlpatterns +="): (
        _DJANGO + "from django.urls import include, path\nurlpatterns = []"
    ),
    ("openai-agents-session.md", "from memoryhub.scope import Scope"): (
        _DOMAIN + "from memoryhub.integrations.openai_agents import MemoryhubSession"
    ),
    ("openai-agents-session.md", "session = MemoryhubSession("): (
        "from memoryhub.client import HttpMemoryStore\n"
        "from memoryhub.integrations.openai_agents import MemoryhubSession\n"
        'store = HttpMemoryStore(URL, api_key=KEY, domain="support")'
    ),
    ("rest-api.md", "from memoryhub.client import HttpMemory\n"): (
        _DOMAIN
        + "from memoryhub.scope import Scope\nfrom memoryhub.sources import DjangoMemory\n"
        + 'local_notes = DjangoMemory(Scope.for_domain(domain), sources=["handbook"])'
    ),
}

#: What a reader starting the next page on a fresh site has: the demo's memory erased.
_NEXT_PAGE = (
    _DOMAIN
    + """
from memoryhub import policy
from memoryhub.scope import Scope
from memoryhub.services import forget
forget.forget(
    Scope.for_domain(domain),
    forget.ForgetRequest(all=True, sources=("memory",)),
    principal=policy.SystemPrincipal(label="next page"),
)
"""
)


def _names(page: str, start: str, block: docs_blocks.Block) -> bool:
    """Whether a table's (page, start) names ``block`` (its first line begins so)."""
    return page == block.page and (block.first + "\n").startswith(start)


def _matching(table: dict[tuple[str, str], str], block: docs_blocks.Block) -> str | None:
    for (page, start), value in table.items():
        if _names(page, start, block):
            return value
    return None


def _runnable() -> list[docs_blocks.Block]:
    return [
        block
        for page in HOWTOS
        for block in docs_blocks.blocks(page)
        if _matching(NOT_RUN, block) is None
    ]


def test_every_how_to_block_runs_here_or_says_where_it_runs() -> None:
    everything = [block for page in HOWTOS for block in docs_blocks.blocks(page)]
    for (page, start), why in {**NOT_RUN, **PRELUDES}.items():
        named = [block for block in everything if _names(page, start, block)]
        assert len(named) == 1, f"{page}: {start!r} names {len(named)} blocks ({why[:40]}…)"
    runnable = _runnable()
    assert len(runnable) >= 15, [str(block) for block in runnable]
    assert len(runnable) + len(NOT_RUN) == len(everything)


def _script(blocks: list[docs_blocks.Block], site: Site, scratch: Path) -> str:
    lines = ["set -euo pipefail"]
    page = None
    for n, block in enumerate(blocks):
        if block.page != page:
            page = block.page
            (scratch / "next-page.py").write_text(_NEXT_PAGE)
            lines.append(f'"$PY" -m tests.docs_blocks {scratch / "next-page.py"} >/dev/null')
        lines.append(f"echo '@@ block {n}'")
        if block.language == "python":
            path = scratch / f"{Path(block.page).stem}-{block.line}.py"
            path.write_text(block.body)
            prelude = _matching(PRELUDES, block)
            if prelude is not None:
                Path(f"{path}.prelude").write_text(prelude)
            lines.append(f'KEY="${{KEY:-}}" "$PY" -m tests.docs_blocks {path}')
        else:
            commands, _ = docs_blocks.shell_parts(block.body)
            commands = commands.replace("http://127.0.0.1:8000", site.url(""))
            commands = commands.replace("/tmp/", f"{scratch}/")
            lines.append(commands.replace(".venv/bin/python", '"$PY"'))
    return "\n".join(lines)


def test_the_how_tos_run_as_written_on_make_run(site: Site, tmp_path: Path) -> None:
    wait_for(site.settled, timeout=180, what="the site, its worker and the demo's records")
    blocks = _runnable()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"}
    }
    # A Python block that needs Django says so in its prelude; the client's blocks run
    # in a process without Django settings, as the REST page promises.
    env.update(PY=sys.executable, MEMORYHUB_DATA_DIR=str(site.data))
    env.update(MEMORYHUB_URL=site.url(""), MEMORYHUB_DOMAIN="support")
    done = subprocess.run(
        ["bash", "-c", _script(blocks, site, tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    outputs = re.split(r"^@@ block \d+\n", done.stdout, flags=re.M)[1:]
    failed = blocks[len(outputs) - 1] if outputs else None
    assert done.returncode == 0, f"{failed}\n{outputs[-1:]}\n{done.stderr[-3000:]}"
    assert len(outputs) == len(blocks)
    checked = 0
    for block, output in zip(blocks, outputs, strict=True):
        if block.language == "python":
            assert "ran;" in output, (str(block), output)
            checked += int(re.search(r"ran; (\d+)", output).group(1))
        else:
            commands, expected = docs_blocks.shell_parts(block.body)
            checked += docs_blocks.check_answers(commands, expected, output)
    assert checked >= 30
