"""The install lines work for someone who has only the repository: the wheel builds,
installs into a fresh virtual environment, and its client runs there without Django;
every extra the docs name is one the wheel declares (``pip install django-memoryhub[…]``
from the index ended in "from versions: none", with no page saying what to do instead)."""

from __future__ import annotations

import re
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest

from tests.distribution import ROOT, build

CLIENT = """
import sys
from memoryhub.client import HttpMemoryStore, StoredRecord, SyncHttpMemoryStore
from memoryhub.install import install_hint

store = SyncHttpMemoryStore("http://127.0.0.1:9", api_key="k", domain="support")
assert StoredRecord(scope="user:alice", key="k", value="v").key == "k"
assert "django" not in sys.modules, sorted(m for m in sys.modules if m.startswith("django"))
print(install_hint("langgraph"))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    [built] = build(tmp_path_factory).glob("django_memoryhub-*.whl")
    return built


def declared_extras(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        [metadata] = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
    return set(re.findall(r"^Provides-Extra: (\S+)$", text, re.M))


def test_every_extra_the_docs_name_is_declared(wheel: Path) -> None:
    named = set()
    for page in [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]:
        named |= set(re.findall(r"django-memoryhub\[([\w-]+)\]", page.read_text()))
        named |= set(re.findall(r"whl\[([\w-]+)\]", page.read_text()))
    assert named, "the docs name no extra"
    assert named <= declared_extras(wheel), named - declared_extras(wheel)


def test_the_wheel_installs_in_a_fresh_environment_and_its_client_needs_no_django(
    wheel: Path, tmp_path: Path
) -> None:
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # As the pages say: the distribution without its server's dependencies, then the
    # client's own (they said httpx alone; the client's retries need tenacity).
    for page in ("install.md", "rest-api.md"):
        assert "pip install httpx tenacity\n" in (ROOT / "docs" / "how-to" / page).read_text()
    subprocess.run([*install, "--no-deps", str(wheel)], check=True, timeout=300)
    subprocess.run([*install, "httpx", "tenacity"], check=True, timeout=300)
    used = subprocess.run(
        [str(python), "-c", CLIENT], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert used.returncode == 0, used.stderr
    assert used.stdout.strip().startswith("pip install 'django-memoryhub[langgraph]'")
