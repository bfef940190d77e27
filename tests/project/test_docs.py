"""The documentation site (mkdocs.yml, docs/): it builds with warnings as errors, its
generated reference pages are there, and its pages keep to their roles (no lab notes:
commit hashes, issue numbers or host nicknames; measurements on the benchmarks page
only). The README is held to the same rules and must stay short."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(path for path in DOCS.rglob("*.md") if "hooks" not in path.parts)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = built.stdout + built.stderr
    assert built.returncode == 0, log
    warnings = [line for line in log.splitlines() if re.match(r"\W*(WARNING|ERROR)\b", line)]
    assert not warnings, "\n".join(warnings)
    return out


def test_the_site_builds_strictly_with_every_page_in_the_nav(site: Path) -> None:
    for page in PAGES:
        relative = page.relative_to(DOCS).with_suffix("")
        if relative.name == "index":
            relative = relative.parent
        html = site / relative / "index.html"
        assert html.exists(), f"{page} was not built"
        assert "<!-- generated:" not in html.read_text(), f"{page}: a marker was left"


def test_the_reference_is_generated_from_the_code(site: Path) -> None:
    rest = (site / "reference" / "rest-api" / "index.html").read_text()
    assert "/api/v1/domains/{domain}/records" in rest
    assert (site / "reference" / "openapi.json").stat().st_size > 1000
    mcp = (site / "reference" / "mcp" / "index.html").read_text()
    from memoryhub.mcp.tools import TOOLS

    for name in TOOLS:
        assert name in mcp, name
    settings = (site / "reference" / "settings" / "index.html").read_text()
    from memoryhub.conf import DEFAULTS

    for name in DEFAULTS:
        assert name in settings, name
    checks = (site / "reference" / "checks" / "index.html").read_text()
    for ident in ("memoryhub.E001", "memoryhub.W001", "memoryhub.E017"):
        assert ident in checks, ident
    commands = (site / "reference" / "commands" / "index.html").read_text()
    for command in ("create_org", "create_api_key", "memoryhub_reembed", "--expires-in-days"):
        assert command in commands, command
    for plot in ("latency", "throughput", "ingest", "quality"):
        image = site / "benchmarks" / f"{plot}.png"
        assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot


def _prose(path: Path) -> str:
    return path.read_text()


HASH = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w/.-])")
LAB_NOTES = re.compile(
    r"\b(slow|slower|fast|faster) host\b|\bissue \d+|\bseeds? 0\d\d\b|(?<![\w&])#\d{1,4}\b",
    re.I,
)
MEASUREMENT = re.compile(
    r"\b\d[\d,.]*\s?(ms|µs)\b|\brecords/s\b|\bQPS\b|\bqueries a second\b|\brecall@10 0\.\d"
)
#: Pages that may hold measurements: the benchmarks page, and the mutation-testing
#: page's counts of its last run.
MEASURED = {"benchmarks.md", "mutation.md"}


@pytest.mark.parametrize(
    "path", [*PAGES, ROOT / "README.md"], ids=lambda p: str(p.relative_to(ROOT))
)
def test_pages_carry_no_lab_notes(path: Path) -> None:
    text = _prose(path)
    assert not HASH.findall(text), f"{path}: commit hashes {HASH.findall(text)}"
    assert not LAB_NOTES.search(text), f"{path}: {LAB_NOTES.search(text)}"
    if path.name not in MEASURED:
        found = MEASUREMENT.search(text)
        assert found is None, f"{path}: a measurement belongs on the benchmarks page: {found}"


def test_the_readme_is_short_and_links_into_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for command in ("make run", "make test"):
        assert command in readme
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).exists(), target


def test_the_tutorials_banner_is_what_a_fresh_make_run_prints() -> None:
    """``make run`` installs no local model: its banner names the hashing embedder (the
    tutorial showed all-MiniLM-L6-v2)."""
    from config.run import embedder_line

    tutorial = (DOCS / "tutorial.md").read_text()
    assert embedder_line({"MEMORYHUB_EMBEDDER": "hashing"}) in tutorial


def test_the_example_port_is_not_the_docs_servers() -> None:
    """``make run PORT=8001`` collided with ``make docs``, whose default port is 8001."""
    docs_port = re.search(r"^DOCS_PORT \?= (\d+)", (ROOT / "Makefile").read_text(), re.M)
    assert docs_port is not None
    for page in (ROOT / "README.md", DOCS / "tutorial.md"):
        assert f"PORT={docs_port.group(1)}" not in page.read_text(), page.name


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


@pytest.mark.django_db
def test_the_erasure_pages_python_runs_as_written(tenant, other_tenant) -> None:
    """It used a ``domain`` it never defined."""
    from memoryhub.models import MemoryRecord
    from memoryhub.services import write
    from tenants.models import Domain, Org

    Org.objects.filter(pk=tenant.org.pk).update(slug="demo")
    assert Domain.objects.filter(org__slug="demo", slug="support").exists()
    write.write(tenant.scope, [{"content": "alice likes tea", "namespace": "user:alice"}])
    write.write(other_tenant.scope, [{"content": "globex alice", "namespace": "user:alice"}])
    [block] = python_blocks(DOCS / "how-to" / "erase.md")
    namespace: dict[str, object] = {}
    exec(compile(block, "erase.md", "exec"), namespace)
    assert namespace["result"].deleted == 1
    assert list(MemoryRecord.unscoped.values_list("content", flat=True)) == ["globex alice"]


def test_names_in_tables_and_headings_in_the_contents_are_shown_whole(site: Path) -> None:
    """The settings table broke names mid-word (``MEMORYHUB_DATA_D IR``); the REST
    reference's contents cut its paths with an ellipsis."""
    page = (site / "reference" / "settings" / "index.html").read_text()
    assert 'href="../../stylesheets/extra.css"' in page
    css = (site / "stylesheets" / "extra.css").read_text()
    assert re.search(r"table:not\(\[class\]\) td code \{[^}]*white-space: nowrap", css)
    assert re.search(r"\.md-nav--secondary \.md-ellipsis \{[^}]*white-space: normal", css)
