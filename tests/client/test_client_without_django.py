"""``memoryhub.client`` in a plain Python process: no ``DJANGO_SETTINGS_MODULE``, and an
import hook that refuses Django and DRF, against a live memoryhub server. Two orgs' keys
each see only their own org's memory; a domain of another org is a 404, bad input a
``ValidationFailed``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memoryhub.models import MemoryRecord
from tests.factories import DomainFactory, create_api_key

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = {"can_read": True, "can_write": True, "can_forget": True}

#: Installed first in the plain process: an import of Django or DRF, by the client or by
#: anything it imports, fails there.
REFUSE_DJANGO = """
import sys
from importlib.abc import MetaPathFinder

REFUSED = ("django", "rest_framework")


class RefuseDjango(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in REFUSED:
            raise ImportError(f"{name} is refused: the client must not import it")
        return None


sys.meta_path.insert(0, RefuseDjango())
"""

#: The agent: HttpMemory and both HTTP stores, for two orgs' keys on one server. It
#: prints what it saw as JSON; the test judges it.
AGENT = """
import asyncio
import json

from memoryhub.client import (
    HttpMemory,
    HttpMemoryError,
    HttpMemoryStore,
    StoredRecord,
    SyncHttpMemoryStore,
)
from memoryhub.exceptions import ValidationFailed
from memoryhub.items import MemoryItem

url, keys = sys.argv[1], json.loads(sys.argv[2])


def failure(error):
    return {
        "status": error.status,
        "code": error.code,
        "errors": error.errors,
        "validation_failed": isinstance(error, ValidationFailed),
    }


async def raised(call):
    try:
        await call
    except HttpMemoryError as error:
        return failure(error)
    return None


def raised_sync(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except HttpMemoryError as error:
        return failure(error)
    return None


async def main():
    seen = {}
    memories = {
        org: HttpMemory(url, api_key=key, domain="support", namespaces=["user:alice"])
        for org, key in keys.items()
    }
    for org, memory in memories.items():
        result = await memory.write([MemoryItem(f"The {org} invoice is kept on file.", "agent")])
        seen[f"{org} wrote"] = result.accepted
    for org, memory in memories.items():
        items = await memory.query("invoice kept on file", k=5)
        seen[f"{org} found"] = [item.content for item in items]

    acme = SyncHttpMemoryStore(url, api_key=keys["acme"], domain="support")
    globex = HttpMemoryStore(url, api_key=keys["globex"], domain="support")
    acme.put(StoredRecord(scope="user:alice", key="currency", value="EUR"))
    await globex.put(StoredRecord(scope="user:alice", key="currency", value={"code": "USD"}))
    seen["acme get"] = acme.get(scope="user:alice", key="currency").value
    seen["globex get"] = (await globex.get(scope="user:alice", key="currency")).value
    seen["acme search"] = [r.value for r in acme.search(scope="user:alice")]
    seen["globex search"] = [r.value for r in await globex.search(scope="user:alice")]
    seen["acme forgot"] = acme.forget(scope="user:alice", key="currency")
    seen["globex get after acme forgot"] = (
        await globex.get(scope="user:alice", key="currency")
    ).value
    seen["acme get after forget"] = acme.get(scope="user:alice", key="currency")

    # globex's "legal" domain: there for globex's key, not for acme's.
    await HttpMemoryStore(url, api_key=keys["globex"], domain="legal").put(
        StoredRecord(scope="user:bob", key="contract", value="signed")
    )
    seen["acme store on legal"] = raised_sync(
        SyncHttpMemoryStore(url, api_key=keys["acme"], domain="legal").get,
        scope="user:bob",
        key="contract",
    )
    seen["acme async store on legal"] = await raised(
        HttpMemoryStore(url, api_key=keys["acme"], domain="legal").search(scope="user:bob")
    )
    seen["acme memory on legal"] = await raised(
        HttpMemory(url, api_key=keys["acme"], domain="legal").query("contract", k=3)
    )

    seen["blank value"] = raised_sync(
        acme.put, StoredRecord(scope="user:alice", key="note", value="   ")
    )
    seen["unknown kind"] = await raised(globex.search(scope="user:alice", kind="dream"))
    seen["k of 0"] = await raised(memories["acme"].query("invoice", k=0))
    return seen


seen = asyncio.run(main())
seen["django modules"] = sorted(
    name for name in sys.modules if name.partition(".")[0] in REFUSED
)
print(json.dumps(seen))
"""


def plain_python(script: str, *args: str) -> str:
    """Run ``script`` in a new Python process with no Django settings, from this
    checkout; return its output (a failure shows its stderr)."""
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    completed = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout


def test_importing_the_client_loads_no_django():
    loaded = json.loads(
        plain_python(
            "import json, sys\nimport memoryhub.client\nprint(json.dumps(list(sys.modules)))"
        )
    )
    assert [name for name in loaded if name.partition(".")[0] in ("django", "rest_framework")] == []
    assert sorted(name for name in loaded if name.partition(".")[0] == "memoryhub") == [
        "memoryhub",
        "memoryhub.client",
        "memoryhub.client.errors",
        "memoryhub.client.http",
        "memoryhub.client.rest",
        "memoryhub.client.retries",
        "memoryhub.client.stores",
        "memoryhub.exceptions",
        "memoryhub.items",
        "memoryhub.openai_compatible",
    ]


@pytest.mark.parametrize(
    "module",
    [
        "memoryhub.integrations.anthropic",
        "memoryhub.integrations.openai_agents",
        "memoryhub.integrations.langgraph",
    ],
)
def test_the_framework_adapters_over_http_load_no_django(module):
    """An agent in another service uses each adapter over the HTTP client, without
    Django; only the in-process LangGraph store (``...langgraph.django``) needs it."""
    plain_python(REFUSE_DJANGO + f"import {module}\n")


def test_the_import_hook_refuses_django():
    """The guard the agent runs under does refuse: importing Django fails under it."""
    with pytest.raises(AssertionError, match="django is refused"):
        plain_python(REFUSE_DJANGO + "import django\n")


@pytest.mark.django_db(transaction=True)
def test_an_agent_without_django_sees_only_its_own_orgs_memory(
    live_server: Any, tenant: Any, other_tenant: Any
) -> None:
    DomainFactory(org=other_tenant.org, slug="legal")
    keys = {
        "acme": create_api_key(org=tenant.org, **EVERYTHING)[1],
        "globex": create_api_key(org=other_tenant.org, **EVERYTHING)[1],
    }

    seen = json.loads(plain_python(REFUSE_DJANGO + AGENT, live_server.url, json.dumps(keys)))

    assert seen["django modules"] == []
    assert seen["acme wrote"] == seen["globex wrote"] == ["memory"]
    assert seen["acme found"] == ["The acme invoice is kept on file."]
    assert seen["globex found"] == ["The globex invoice is kept on file."]
    assert (seen["acme get"], seen["globex get"]) == ("EUR", {"code": "USD"})
    assert (seen["acme search"], seen["globex search"]) == (["EUR"], [{"code": "USD"}])
    assert seen["acme forgot"] == 1
    assert seen["globex get after acme forgot"] == {"code": "USD"}
    assert seen["acme get after forget"] is None
    not_found = {
        "status": 404,
        "code": "domain_not_found",
        "errors": None,
        "validation_failed": False,
    }
    assert seen["acme store on legal"] == not_found
    assert seen["acme async store on legal"] == not_found
    assert seen["acme memory on legal"] == not_found
    assert seen["blank value"] == {
        "status": 400,
        "code": "invalid",
        "errors": {"items[0].content": ["may not be blank."]},
        "validation_failed": True,
    }
    assert seen["unknown kind"]["validation_failed"] is True
    assert list(seen["unknown kind"]["errors"]) == ["kind"]
    assert seen["k of 0"]["validation_failed"] is True
    assert seen["k of 0"]["errors"] == {"k": ["must be an integer from 1 to 100."]}

    # What the server holds: each org's writes in its own org, the legal record in globex's.
    by_org = {
        org.slug: sorted(
            MemoryRecord.unscoped.filter(knowledge_base__org=org).values_list("content", flat=True)
        )
        for org in (tenant.org, other_tenant.org)
    }
    assert by_org == {
        "acme": ["The acme invoice is kept on file."],
        "globex": ["The globex invoice is kept on file.", "signed", '{"code": "USD"}'],
    }


def test_an_error_message_names_the_fields_it_holds():
    from memoryhub.client import HttpMemoryError

    errors = {"items[0].content": ["may not be blank."], "k": ["at most 100.", "an integer."]}
    error = HttpMemoryError(400, "invalid", "The request is invalid; see errors.", errors)
    assert str(error) == (
        "HTTP 400 invalid: The request is invalid; see errors. (items[0].content: may not be"
        " blank.; k: at most 100. an integer.)"
    )
    assert error.errors == errors
    assert str(HttpMemoryError(404, "domain_not_found", "No such domain.")) == (
        "HTTP 404 domain_not_found: No such domain."
    )
    long = HttpMemoryError(400, "invalid", "Invalid.", {f"items[{n}]": ["bad."] for n in range(99)})
    assert len(str(long)) < 400 and str(long).endswith("...)")
