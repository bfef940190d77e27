"""The distribution ``django-memoryhub``: its wheel and sdist hold the two apps with their
templates and migrations, and nothing of the runnable site, the tests or benchmarks."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# One worker builds once.
pytestmark = pytest.mark.xdist_group("distribution")

#: What is not source: the embedded servers' data (written while the suite runs, so a
#: build walking the tree could meet a file that vanishes), environments, builds.
NOT_SOURCE = shutil.ignore_patterns(
    ".memoryhub",
    ".venv",
    "build",
    "dist",
    "site",
    "*.egg-info",
    "test-artifacts",
    "mutants",
    "__pycache__",
    ".git",
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("source") / "tree"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def test_the_wheel_is_django_memoryhub_with_both_apps_and_nothing_else(built: Path) -> None:
    (wheel,) = built.glob("django_memoryhub-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    tops = {name.split("/")[0] for name in names if not name.endswith(".dist-info/")}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"memoryhub", "tenants"}
    for needed in (
        "memoryhub/migrations/0001_initial.py",
        "memoryhub/templates/admin/memoryhub/includes/home.html",
        "memoryhub/templatetags/memoryhub_admin.py",
        "memoryhub/py.typed",
        "tenants/migrations/0001_initial.py",
        "tenants/templates/admin/tenants/org/change_form.html",
    ):
        assert needed in names, needed
    assert "Name: django-memoryhub" in metadata.decode()


def test_the_sdist_holds_no_site_tests_or_benchmarks(built: Path) -> None:
    (sdist,) = built.glob("django_memoryhub-*.tar.gz")
    with tarfile.open(sdist) as archive:
        tops = {name.split("/")[1] for name in archive.getnames() if "/" in name}
    assert not tops & {"config", "tests", "benchmarks", "examples", "docs"}, tops
    assert {"memoryhub", "tenants", "pyproject.toml", "README.md"} <= tops
