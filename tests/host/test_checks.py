"""The system checks' ids: each declared once in ``memoryhub.checks.PROBLEMS``, each
reported from one place in the code, and the reference pages generated from the
declarations (the checks from ``PROBLEMS``, the settings from ``conf.SETTINGS``)."""

from __future__ import annotations

import ast
import importlib.util
import re
import string
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.core.checks import Error, Warning

from memoryhub.checks import PROBLEMS, check_broker, check_settings
from memoryhub.conf import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
CHECK_CLASSES = {"Error", "Warning", "Critical", "Info", "Debug", "CheckMessage"}


def _calls() -> list[tuple[str, ast.Call]]:
    """Every call of a plain name in ``memoryhub/`` and ``tenants/``, but those in
    ``checks.report``, which builds the messages from the declarations."""
    found = []
    for package in ("memoryhub", "tenants"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            skipped = {
                id(node)
                for function in ast.walk(tree)
                if isinstance(function, ast.FunctionDef) and function.name == "report"
                for node in ast.walk(function)
            }
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and id(node) not in skipped
                ):
                    found.append((str(path.relative_to(ROOT)), node))
    return found


def _reports() -> list[tuple[str, set[str]]]:
    """Each ``report(id, **fields)`` in the code: the id and the fields it fills in."""
    return [
        (str(call.args[0].value), {keyword.arg for keyword in call.keywords if keyword.arg})
        for _, call in _calls()
        if call.func.id == "report" and call.args and isinstance(call.args[0], ast.Constant)
    ]


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_no_id_is_declared_twice() -> None:
    counts = Counter(problem.id for problem in PROBLEMS)
    assert [ident for ident, count in counts.items() if count > 1] == []


def test_ids_are_well_formed_and_match_their_level() -> None:
    for problem in PROBLEMS:
        assert re.fullmatch(r"memoryhub\.[EW]\d{3}", problem.id), problem.id
        level = {"E": Error, "W": Warning}[problem.id.split(".")[1][0]]
        assert problem.level is level, problem.id


def test_every_reported_id_is_declared_and_reported_from_one_place() -> None:
    reported = Counter(ident for ident, _ in _reports())
    declared = {problem.id for problem in PROBLEMS}
    assert set(reported) - declared == set(), "reported but not declared"
    assert declared - set(reported) == set(), "declared but never reported"
    assert {ident: count for ident, count in reported.items() if count > 1} == {}, (
        "an id reported from two places names two problems: declare a new one"
    )


def test_check_messages_are_built_only_from_the_declarations() -> None:
    direct = [
        f"{path}: {call.func.id}(id=...)"
        for path, call in _calls()
        if call.func.id in CHECK_CLASSES and any(keyword.arg == "id" for keyword in call.keywords)
    ]
    assert direct == []


def test_each_report_fills_in_exactly_its_templates_fields() -> None:
    by_id = {problem.id: problem for problem in PROBLEMS}
    for ident, fields in _reports():
        problem = by_id[ident]
        assert _fields(problem.message) | _fields(problem.hint) == fields, ident


def _out_of_bounds(settings: Any, name: str, value: Any) -> list[str]:
    settings.MEMORYHUB = {name: value}
    return [m.msg for m in check_settings() if m.id == "memoryhub.E002"]


def test_the_integer_bounds_come_from_the_setting_declarations(settings: Any) -> None:
    integers = {name: setting for name, setting in SETTINGS.items() if setting.integer}
    assert {"MAX_K", "MAX_CONTEXT_TURNS", "RERANK_CANDIDATES"} <= set(integers)
    for name, setting in integers.items():
        assert setting.minimum is not None
        [message] = _out_of_bounds(settings, name, setting.minimum - 1)
        assert name in message, message
        assert _out_of_bounds(settings, name, setting.minimum) == [], name
        assert len(_out_of_bounds(settings, name, str(setting.minimum))) == 1, name
        if setting.maximum is not None:
            [message] = _out_of_bounds(settings, name, setting.maximum + 1)
            assert f"from {setting.minimum} to {setting.maximum}" in message
            assert _out_of_bounds(settings, name, setting.maximum) == [], name


def test_default_k_above_max_k_has_its_own_id(settings: Any) -> None:
    settings.MEMORYHUB = {"DEFAULT_K": 11, "MAX_K": 10}
    assert [m.id for m in check_settings()] == ["memoryhub.E019"]


@pytest.mark.parametrize(
    ("previous", "problems"),
    [
        ("memoryhub.embedders.HashingEmbedder", ["memoryhub.E011"]),
        (
            [{"EMBEDDER": "memoryhub.embedders.HashingEmbedder"}, {"OPTIONS": {}}],
            ["memoryhub.E011"],
        ),
        ([{"EMBEDDER": "no.such.Embedder"}], ["memoryhub.E023"]),
        ([{"EMBEDDER": "memoryhub.embedders.HashingEmbedder"}], []),
    ],
)
def test_previous_embedders_are_checked(settings: Any, previous: Any, problems: list[str]) -> None:
    settings.MEMORYHUB = {"PREVIOUS_EMBEDDERS": previous}
    assert [m.id for m in check_settings()] == problems


def test_a_sweep_at_another_interval_than_sweep_interval_is_its_own_warning(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from celery import current_app

    from memoryhub.schedule import beat_schedule

    settings.MEMORYHUB = {"SWEEP_INTERVAL": 60}
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.CELERY_BEAT_SCHEDULE = {}
    monkeypatch.setitem(current_app.conf, "task_always_eager", False)
    monkeypatch.setitem(current_app.conf, "broker_url", "redis://127.0.0.1:9/0")
    monkeypatch.setitem(current_app.conf, "beat_schedule", {})
    assert [m.id for m in check_broker()] == ["memoryhub.W004"]
    monkeypatch.setitem(current_app.conf, "beat_schedule", beat_schedule({"SWEEP_INTERVAL": 30}))
    [warning] = check_broker()
    assert warning.id == "memoryhub.W005" and "(60 s)" in warning.msg
    monkeypatch.setitem(current_app.conf, "beat_schedule", beat_schedule({"SWEEP_INTERVAL": 60}))
    assert check_broker() == []


def _generate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate", ROOT / "docs/hooks/generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checks_reference_is_generated_from_the_declarations() -> None:
    page = _generate().render_checks()
    for problem in PROBLEMS:
        assert f"### `{problem.id}`" in page and problem.summary in page, problem.id
    assert page.count("### ") == len(PROBLEMS)


def test_the_settings_reference_is_generated_from_the_declarations() -> None:
    page = _generate().render_settings()
    for name, setting in SETTINGS.items():
        [row] = [line for line in page.splitlines() if line.startswith(f"| `{name}` |")]
        assert setting.doc.replace("|", "\\|") in row, name
    assert "`4 * 1024 * 1024` (4,194,304)" in page
    assert "An integer from 0 to 20." in page


def test_the_docs_name_only_declared_ids() -> None:
    declared = {problem.id for problem in PROBLEMS}
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
    for page in pages:
        if page.name == "changelog.md":
            continue
        for ident in re.findall(r"memoryhub\.[EW]\d{3}", page.read_text()):
            assert ident in declared, f"{page}: {ident}"


def test_the_changelog_gives_every_id_added_by_the_renumbering() -> None:
    changelog = (ROOT / "docs" / "changelog.md").read_text()
    section = changelog.split("### System check ids renumbered")[1].split("\n## ")[0]
    new_ids = set(
        re.findall(r"^\| `memoryhub\.[EW]\d{3}` \| `(memoryhub\.[EW]\d{3})`", section, re.M)
    )
    assert new_ids <= {problem.id for problem in PROBLEMS}
    assert {"memoryhub.E019", "memoryhub.E027", "memoryhub.W005"} <= new_ids
