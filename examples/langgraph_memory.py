"""A LangGraph agent whose long-term memory is memoryhub (``MemoryhubStore``).

Runs offline: the graph's nodes stand in for a model; the memory is real (memoryhub's
services on PostgreSQL + pgvector). Run it with::

    .venv/bin/python examples/langgraph_memory.py

It uses the site's database (the embedded one by default, or ``DATABASE_URL``), works in
two orgs of its own (``example-acme-<random>`` and ``example-globex-<random>``), never
touches anything else, and erases and deletes them before it exits. Against a memoryhub
server, ``HttpMemoryhubStore(url, api_key=..., domain="support")`` replaces the store
and nothing else changes.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import BaseStore  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

from memoryhub import policy  # noqa: E402
from memoryhub.integrations.langgraph.django import MemoryhubStore  # noqa: E402
from memoryhub.scope import Scope  # noqa: E402
from memoryhub.services import forget  # noqa: E402
from tenants.models import Domain, Org  # noqa: E402

RUN = uuid.uuid4().hex[:8]


class Turn(TypedDict):
    user: str
    message: str
    recalled: list[str]


def recall(state: Turn, *, store: BaseStore) -> dict[str, Any]:
    """What the user told us before that bears on this message."""
    found = store.search((f"user:{state['user']}", "memories"), query=state["message"], limit=2)
    return {"recalled": [item.value["text"] for item in found]}


def remember(state: Turn, *, store: BaseStore) -> dict[str, Any]:
    """Keep the message, keyed by its position in the user's memories."""
    namespace = (f"user:{state['user']}", "memories")
    count = len(store.search(namespace, limit=100))
    store.put(namespace, f"m{count}", {"text": state["message"]})
    return {}


def build(store: BaseStore) -> Any:
    graph = StateGraph(Turn)
    graph.add_node("recall", recall)
    graph.add_node("remember", remember)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "remember")
    graph.add_edge("remember", END)
    return graph.compile(store=store)


def tenant(name: str) -> Scope:
    """A new org of this run's own (never an existing one)."""
    org = Org.objects.create(slug=f"example-{name}-{RUN}", name=f"Example {name} ({RUN})")
    return Scope.for_domain(Domain.objects.create(org=org, slug="support"))


def clean_up(*scopes: Scope) -> None:
    """Erase the run's orgs through the erasure service, then delete them."""
    for scope in scopes:
        forget.forget_org(scope.org_id, principal=policy.SystemPrincipal(label="example"))
        Org.objects.filter(pk=scope.org_id).delete()


def main() -> None:
    acme, globex = tenant("acme"), tenant("globex")
    store = MemoryhubStore(acme, index={"fields": ["text"]})
    try:
        agent = build(store)
        for message in ("I adopted a cat named Miso", "I work on the billing team"):
            agent.invoke({"user": "alice", "message": message, "recalled": []})
        answer = agent.invoke({"user": "alice", "message": "what is my cat called?"})
        print("recalled:", answer["recalled"][0])
        print("namespaces:", store.list_namespaces())
        other = build(MemoryhubStore(globex))
        seen = other.invoke({"user": "alice", "message": "what is my cat called?"})
        print("other tenant recalls:", seen["recalled"])
        # Alice asks to be forgotten: memoryhub's erasure of her namespace.
        erasure = forget.ForgetRequest(namespace="user:alice")
        forget.forget(acme, erasure, principal=policy.SystemPrincipal(label="example"))
        print("after erasure:", store.search(("user:alice",)))
    finally:
        clean_up(acme, globex)


if __name__ == "__main__":
    main()
