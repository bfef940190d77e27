"""An agent that keeps its memory in memoryhub over MCP: no model, no memoryhub import.

Start the site with ``make run``, make a key, then run this with the official MCP SDK
(``pip install mcp``; ``make install`` has it)::

    KEY=$(.venv/bin/python manage.py create_api_key demo --domain support --name agent \\
          --read --write --forget | tail -1)
    MEMORYHUB_API_KEY=$KEY .venv/bin/python examples/mcp_agent.py

It writes a few memories, queries them, prints the grounding block a model would get in
its prompt, and forgets the user it made up. ``--url`` (``MEMORYHUB_URL``) is the site,
``--key`` (``MEMORYHUB_API_KEY``) the key, ``--domain`` the domain for an org-wide key.

The client speaks MCP 2026-07-28 (no handshake: it asks ``server/discover`` once, then
every request carries its version) and would fall back to the ``initialize`` handshake
with an older server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import httpx2
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

MEMORIES = [
    {"content": "Alice prefers to be paid in EUR.", "key": "currency", "namespace": "user:alice"},
    {"content": "Alice's invoices go to billing@alice.example.", "namespace": "user:alice"},
    {"content": "Refunds over $100 need a receipt.", "metadata": {"team": "billing"}},
]


async def use(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    body = json.loads(result.content[0].text)
    if result.is_error:  # {"code", "detail", "errors"?}, as the REST API answers
        raise SystemExit(
            f"{tool} failed: {body['code']}: {body['detail']} {body.get('errors', '')}"
        )
    return body


def endpoint(url: str) -> str:
    """The MCP endpoint of a site: the site's address, or the endpoint itself."""
    site = url.rstrip("/")
    site = site.removesuffix("/mcp")
    return f"{site}/mcp/"


async def main(url: str, key: str, domain: str | None) -> None:
    where = {"domain": domain} if domain else {}
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(endpoint(url), http_client=http)
        async with Client(transport, mode="auto") as client:
            await work(client, where)


def first_error(exc: BaseException) -> BaseException:
    """The first error inside the task groups' ExceptionGroups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def work(client: Client, where: dict[str, str]) -> None:
    server = client.server_info  # at 2026-07-28, as every answer's _meta gives it
    name = f"{server.name} {server.version}" if server else "a server"
    print(f"connected to {name} at MCP {client.protocol_version}")
    print("tools:", ", ".join(tool.name for tool in (await client.list_tools()).tools))

    written = await use(client, "memory_write", {**where, "items": MEMORIES})
    print(f"wrote {len(written['records'])} memories to {', '.join(written['accepted'])}")

    question = "how should Alice be paid"
    found = await use(
        client,
        "memory_query",
        {**where, "query": question, "k": 3, "namespaces": ["", "user:alice"]},
    )
    print(f"\nQ: {question}\n{found['grounding']}\n")

    forgotten = await use(client, "memory_forget", {**where, "namespace": "user:alice"})
    print(f"forgot user:alice: {forgotten['deleted']} records, receipt {forgotten['receipt']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("MEMORYHUB_URL", "http://127.0.0.1:8000"),
        help="the site (http://127.0.0.1:8000) or its MCP endpoint (…/mcp/);"
        " default MEMORYHUB_URL, else http://127.0.0.1:8000",
    )
    parser.add_argument(
        "--key", default=os.environ.get("MEMORYHUB_API_KEY"), help="an API key (MEMORYHUB_API_KEY)"
    )
    parser.add_argument(
        "--domain",
        default=os.environ.get("MEMORYHUB_DOMAIN"),
        help="the domain's slug, for a key bound to none (MEMORYHUB_DOMAIN)",
    )
    options = parser.parse_args()
    if not options.key:
        sys.exit("Give the API key with --key or MEMORYHUB_API_KEY.")
    try:
        asyncio.run(main(options.url, options.key, options.domain))
    except Exception as exc:  # one line, not the task groups' 60-line tracebacks
        error = first_error(exc)
        if isinstance(error, SystemExit):
            raise error from None
        sys.exit(f"{endpoint(options.url)}: {type(error).__name__}: {error}")
