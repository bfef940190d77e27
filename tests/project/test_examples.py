"""The runnable examples run, and print what the seeds print (the seeds: the prototype
texts whose printed outputs are the behaviour spec, ``test_sources_seeds.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memoryhub.scope import Scope
from memoryhub.services import knowledge_bases
from tests.programs import database_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db(transaction=True)
def test_agent_grounding_example_reproduces_seed_003():
    from memoryhub.models import MemoryRecord
    from memoryhub.services import write
    from tenants.models import Org
    from tests.factories import DomainFactory, OrgFactory

    # The site already has an org called acme, with a handbook: the example leaves it be.
    theirs = Scope.for_domain(DomainFactory(org=OrgFactory(slug="acme"), slug="support"))
    knowledge_bases.ensure_knowledge_base(theirs, "handbook")
    write.write(theirs, [{"content": "acme's own handbook"}], sources=["handbook"])
    env = {**os.environ, "DATABASE_URL": database_url()}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    completed = subprocess.run(
        [sys.executable, "examples/agent_grounding.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == "Refunds go back to the original payment method in 5 business days."
    assert lines[1].endswith(
        "[handbook] Refunds are issued to the original payment method within 5 business days."
    )
    assert "other tenant sees: []" in lines
    assert lines[-2:] == [
        "Relevant context:",
        "[handbook] Refunds are issued to the original payment method within 5 business days.",
    ]
    # The example cleans up after itself, and touched nothing else.
    assert list(MemoryRecord.unscoped.values_list("content", flat=True)) == ["acme's own handbook"]
    assert list(Org.objects.values_list("slug", flat=True)) == ["acme"]
