"""Rooms a maintainer can hold in their head: functions within 80 lines, modules within
600, complexity and argument counts within ruff's limits (pyproject.toml). What exceeded
them when the guards came in is listed here, or carries a noqa comment; the lists may
only shrink (mend a function, then take it off), and nothing new joins them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("memoryhub", "tenants", "config")

MAX_FUNCTION_LINES = 80
#: Functions longer than that, and their length, when the guard came in.
LONG_FUNCTIONS = {}

MAX_MODULE_LINES = 600
#: Modules longer than that, and their length, when the guard came in.
LONG_MODULES = {}

#: ``noqa`` comments for ruff's C901 (complexity) and PLR0913 (arguments) when the rules
#: came in.
COMPLEXITY_EXCEPTIONS = 12


def sources() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def against_baseline(
    found: dict[str, int], baseline: dict[str, int], limit: int
) -> tuple[dict[str, int], list[str]]:
    """What ``found`` (lengths past ``limit``) has that is new or longer than its
    ``baseline`` entry, and the baseline's entries no longer past the limit."""
    grown = {name: n for name, n in found.items() if n > baseline.get(name, limit)}
    return grown, sorted(set(baseline) - set(found))


def test_no_function_grows_past_80_lines():
    found = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                name = f"{path.relative_to(ROOT)}:{node.name}"
                if length > MAX_FUNCTION_LINES:
                    found[name] = length
    grown, mended = against_baseline(found, LONG_FUNCTIONS, MAX_FUNCTION_LINES)
    assert grown == {}, "new or grown functions past 80 lines"
    assert mended == [], "mended: take them off LONG_FUNCTIONS"


def test_no_module_grows_past_600_lines():
    found = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in sources()
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES
    }
    grown, mended = against_baseline(found, LONG_MODULES, MAX_MODULE_LINES)
    assert grown == {}, "new or grown modules past 600 lines"
    assert mended == [], "mended: take them off LONG_MODULES"


def test_the_complexity_baseline_only_shrinks():
    pattern = re.compile(r"#\s*noqa:[^\n]*\b(C901|PLR0913)\b")
    count = sum(len(pattern.findall(path.read_text())) for path in sources())
    assert count <= COMPLEXITY_EXCEPTIONS, "a new function past ruff's complexity limits"
    assert count == COMPLEXITY_EXCEPTIONS, "mended: lower COMPLEXITY_EXCEPTIONS"


def test_every_install_line_names_the_distribution():
    """``memoryhub`` on a package index is another project: a hint to
    ``pip install 'memoryhub[local-embeddings]'`` (system check E004) installed it."""
    wrong = re.compile(r"pip install ['\"]?memoryhub\b")
    places = [*sources(), *(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]
    places += sorted((ROOT / "examples").rglob("*.py"))
    found = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for path in places
        for line in path.read_text().splitlines()
        if wrong.search(line)
    ]
    assert found == []


def test_the_install_hint_says_both_ways():
    from memoryhub.install import install_hint

    assert install_hint("local-embeddings") == (
        "pip install 'django-memoryhub[local-embeddings]'"
        " (in a checkout: pip install -e '.[local-embeddings]')"
    )


def test_the_tests_hold_no_type_ignore():
    """mypy checks the packages (``make lint``), not the tests: an ignore in a test
    silences nothing and tells a reader something was checked."""
    marked = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "# type: " + "ignore" in line
    ]
    assert marked == []
