"""The operator material in ``docs/operations/``: the alert rules pass Prometheus's own
check, and every metric the rules and the dashboard name is one memoryhub exposes."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.programs import require_program

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "docs" / "operations" / "memoryhub-alerts.yml"
DASHBOARD = ROOT / "docs" / "operations" / "memoryhub-dashboard.json"


def test_the_alert_rules_pass_promtool():
    promtool = require_program("promtool")
    checked = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.django_db
def test_every_metric_the_rules_and_the_dashboard_name_is_exposed():
    exposed = Client().get("/metrics").content.decode()
    samples = {
        sample.name
        for family in text_string_to_metric_families(exposed)
        for sample in family.samples
    }
    families = {family.name for family in text_string_to_metric_families(exposed)}
    expressions = [ALERTS.read_text()] + [
        target["expr"]
        for panel in json.loads(DASHBOARD.read_text())["panels"]
        for target in panel["targets"]
    ]
    named = {name for text in expressions for name in re.findall(r"memoryhub_\w+", text)}
    assert named
    missing = {
        name
        for name in named
        if name not in samples
        and name not in families
        and not name.endswith(("_bucket", "_total", "_count", "_sum"))
    }
    unknown_counters = {
        name
        for name in named
        if name.endswith(("_bucket", "_total", "_count", "_sum"))
        and re.sub(r"_(bucket|total|count|sum)$", "", name) not in families
    }
    assert missing == set() and unknown_counters == set(), (missing, unknown_counters)
