"""An OpenAI Agents SDK agent whose conversation is kept in memoryhub, over the REST API.

Start the site with ``make run``, make a key that may read, write and forget, then run
this with any OpenAI-compatible model (``pip install "django-memoryhub[openai-agents]"``;
``make install`` has it)::

    KEY=$(.venv/bin/python manage.py create_api_key demo --domain support --name agent \\
          --read --write --forget | tail -1)
    MEMORYHUB_API_KEY=$KEY OPENAI_API_KEY=sk-... .venv/bin/python examples/openai_agents_session.py

Without a model at hand, ``--offline`` answers from a scripted stand-in
(``examples/offline_model.py``): no key, no network.

It asks two questions in one session, the second of which only makes sense after the
first, prints what the session holds, and clears it (a run that fails clears it too).
``--url`` (``MEMORYHUB_URL``) is the site, ``--key`` (``MEMORYHUB_API_KEY``) the key,
``--domain`` the domain; the model is ``--model`` (``OPENAI_MODEL``) at
``OPENAI_BASE_URL`` (OpenAI's API by default), called through the Chat Completions API
that OpenAI-compatible servers share.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner
from openai import AsyncOpenAI

from memoryhub.client import HttpMemoryStore
from memoryhub.integrations.openai_agents import MemoryhubSession

QUESTIONS = ["Which city is the Golden Gate Bridge in?", "And in which state is that?"]
#: What ``--offline``'s stand-in answers, in order.
OFFLINE_REPLIES = ["The Golden Gate Bridge is in San Francisco.", "It is in California."]


def text_of(item: dict) -> str:
    content = item.get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return str(content)


async def main(url: str, key: str, domain: str, model: str, client: AsyncOpenAI) -> None:
    store = HttpMemoryStore(url, api_key=key, domain=domain)
    session = MemoryhubSession(f"example-{uuid.uuid4().hex[:8]}", store)
    agent = Agent(
        name="Assistant",
        instructions="Answer in one short sentence.",
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
    )
    # Traces would go to OpenAI's platform, whatever server answers for the model.
    config = RunConfig(tracing_disabled=True)
    try:
        for question in QUESTIONS:
            result = await Runner.run(agent, question, session=session, run_config=config)
            print(f"user: {question}")
            print(f"assistant: {result.final_output}")

        items = await session.get_items()
        print(f"\nthe session holds {len(items)} items")
        print(f"they are episodic records in namespace {session.namespace!r} of {domain!r}:")
        for item in items:
            print(f"  {item.get('role')}: {text_of(dict(item))}")
    finally:  # a run that failed half-way leaves no turn behind either
        await session.clear_session()
    print(f"cleared: {len(await session.get_items())} items left")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("MEMORYHUB_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--key", default=os.environ.get("MEMORYHUB_API_KEY"))
    parser.add_argument("--domain", default=os.environ.get("MEMORYHUB_DOMAIN", "support"))
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    parser.add_argument(
        "--offline", action="store_true", help="a scripted stand-in answers for the model"
    )
    options = parser.parse_args()
    if not options.key:
        sys.exit("Give the API key with --key or MEMORYHUB_API_KEY.")

    def run(client: AsyncOpenAI) -> None:
        asyncio.run(main(options.url, options.key, options.domain, options.model, client))

    try:
        if options.offline:
            from offline_model import serving

            with serving(replies=OFFLINE_REPLIES) as model:
                run(AsyncOpenAI(base_url=model.base_url, api_key="offline", max_retries=0))
        else:
            run(AsyncOpenAI())
    except Exception as exc:  # one line, not a traceback
        sys.exit(f"the run failed: {type(exc).__name__}: {exc}")
