"""Seed 003's "Working code", against memoryhub: an agent answers from your documents.

Runs offline: ``FakeLLM`` stands in for the model; the retrieval is real (memoryhub's
query service on PostgreSQL + pgvector). Run it with::

    .venv/bin/python examples/agent_grounding.py

It uses the site's database (the embedded one by default, or ``DATABASE_URL``), works in
two orgs of its own (``example-acme-<random>`` and ``example-globex-<random>``), never
touches anything else, and erases and deletes them before it exits.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from asgiref.sync import sync_to_async  # noqa: E402

from memoryhub import policy  # noqa: E402
from memoryhub.items import MemoryItem  # noqa: E402
from memoryhub.scope import Scope  # noqa: E402
from memoryhub.services import knowledge_bases  # noqa: E402
from memoryhub.services.forget import forget_org  # noqa: E402
from memoryhub.sources import DjangoMemory, MemoryContext, as_grounder  # noqa: E402
from tenants.models import Domain, Org  # noqa: E402

HANDBOOK = [
    MemoryItem(
        content="Refunds are issued to the original payment method within 5 business days.",
        source="handbook",
        metadata={"id": "refunds", "team": "support"},
    ),
    MemoryItem(
        content="Orders over $500 need a manager's approval before they ship.",
        source="handbook",
        metadata={"id": "approvals", "team": "ops"},
    ),
]


class FakeLLM:
    """Answers with a fixed reply, and keeps the system prompt it was sent."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.systems: list[str] = []

    async def complete(self, system: str, user: str) -> str:
        self.systems.append(system)
        return self.reply


@dataclass
class Agent:
    """The smallest agent: ground the task in memory, then ask the model."""

    prompt: str
    llm: FakeLLM
    grounder: Callable

    async def run(self, task: str, ctx: MemoryContext) -> str:
        context = await self.grounder(ctx, task)
        system = self.prompt if not context else f"{self.prompt}\n\nRelevant context:\n{context}"
        return await self.llm.complete(system, task)


RUN = uuid.uuid4().hex[:8]


def tenant(name: str) -> Scope:
    """A new org of this run's own (never an existing one)."""
    org = Org.objects.create(slug=f"example-{name}-{RUN}", name=f"Example {name} ({RUN})")
    domain = Domain.objects.create(org=org, slug="support")
    scope = Scope.for_domain(domain)
    knowledge_bases.ensure_knowledge_base(scope, "handbook")
    return scope


def clean_up(*scopes: Scope) -> None:
    """Erase the run's orgs through the erasure service, then delete them."""
    for scope in scopes:
        forget_org(scope.org_id, principal=policy.SystemPrincipal(label="example"))
        Org.objects.filter(pk=scope.org_id).delete()


async def main() -> None:
    acme, globex = await sync_to_async(tenant)("acme"), await sync_to_async(tenant)("globex")
    memory = DjangoMemory(sources=["handbook"], write_to="handbook")
    ctx = MemoryContext(acme, actor="example")
    llm = FakeLLM("Refunds go back to the original payment method in 5 business days.")
    try:
        await memory.write(HANDBOOK, ctx=ctx)
        agent = Agent(
            prompt="Answer only from the grounding block. If it isn't there, say you don't know.",
            llm=llm,
            grounder=as_grounder(memory, k=1),
        )
        print(await agent.run("How long do refunds take?", ctx))

        for item in await memory.query("How long do refunds take?", k=2, ctx=ctx):
            print(f"  {item.score:.2f} [{item.source}] {item.content}")

        other = MemoryContext(globex)
        print("other tenant sees:", await memory.query("refunds", k=2, ctx=other))
        print()
        print("What the model was sent:")
        print(llm.systems[0])
    finally:
        await sync_to_async(clean_up)(acme, globex)


if __name__ == "__main__":
    asyncio.run(main())
