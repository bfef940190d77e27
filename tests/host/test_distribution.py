"""The distribution ``django-memoryhub``: its wheel and sdist hold the two apps with their
templates and migrations, and nothing of the runnable site, the tests or benchmarks."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.distribution import build

# One worker builds once.
pytestmark = pytest.mark.xdist_group("distribution")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory)


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
