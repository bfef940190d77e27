"""Claude's memory tool with its files kept in memoryhub, over the REST API.

Claude asks its memory tool (``memory_20250818``) to view, create and edit files under
``/memories``; ``StoreMemoryTool`` keeps each file as a record of one namespace
(``user:<name>``) of your memoryhub domain. Start the site with ``make run``, make a key,
then run this with the ``anthropic`` extra installed (``make install`` has it)::

    KEY=$(.venv/bin/python manage.py create_api_key demo --domain support --name claude \\
          --read --write --forget | tail -1)
    export ANTHROPIC_API_KEY=sk-ant-...
    MEMORYHUB_API_KEY=$KEY .venv/bin/python examples/anthropic_memory.py

Without a model at hand, ``--offline`` answers from a scripted stand-in
(``examples/offline_model.py``): no key, no network.

It tells Claude something about a user and prints the conversation: Claude's words, each
memory command and the tool's answer. Then it prints the files the namespace holds with
the history of each, and (unless ``--keep``) forgets the namespace, a failed run's too.

``--url`` (``MEMORYHUB_URL``) is the site, ``--key`` (``MEMORYHUB_API_KEY``) the key,
``--domain`` the domain, ``--user`` the user and ``--model`` the Claude model; the SDK
reads ``ANTHROPIC_API_KEY`` (and ``ANTHROPIC_BASE_URL``, to point it elsewhere).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import anthropic
from anthropic.lib.tools import ToolError
from anthropic.types.beta import BetaMemoryTool20250818Command

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from memoryhub.client import SyncHttpMemoryStore
from memoryhub.integrations.anthropic import StoreMemoryTool

SAYS = "Hi, I'm Alice. Please remember: I want my invoices in USD from now on, not EUR."


def indented(text: str) -> str:
    return "    " + text.replace("\n", "\n    ")


class PrintedMemoryTool(StoreMemoryTool):
    """The memory tool, printing each command Claude sends and what it gets back."""

    def execute(self, command: BetaMemoryTool20250818Command) -> str:
        if command.command == "rename":
            print(f"  memory rename {command.old_path} -> {command.new_path}")
        else:
            print(f"  memory {command.command} {command.path}")
        try:
            answer = str(super().execute(command))
        except ToolError as refused:
            print(indented(f"refused: {refused}"))
            raise
        print(indented(answer))
        return answer


def offline_turns(user: str) -> list[list[dict]]:
    """What ``--offline``'s stand-in answers: Claude's turns, as the Messages API sends them."""

    def memory(number: int, **command: str) -> dict:
        return {"type": "tool_use", "id": f"toolu_{number}", "name": "memory", "input": command}

    path = f"/memories/{user}.md"
    return [
        [
            {"type": "text", "text": "Let me check my memory."},
            memory(1, command="view", path="/memories"),
        ],
        [memory(2, command="create", path=path, file_text="Invoices in EUR.\n")],
        [memory(3, command="str_replace", path=path, old_str="EUR", new_str="USD")],
        [{"type": "text", "text": "Noted: your invoices will be in USD from now on."}],
    ]


def main(options: argparse.Namespace, client: anthropic.Anthropic) -> None:
    namespace = f"user:{options.user}"
    store = SyncHttpMemoryStore(options.url, api_key=options.key, domain=options.domain)
    try:
        converse(options, client, store, namespace)
    finally:
        if not options.keep:
            forgotten = store.forget(scope=namespace)
            print(f"\nforgot {namespace}: {forgotten} record{'s' if forgotten != 1 else ''}")


def converse(
    options: argparse.Namespace,
    client: anthropic.Anthropic,
    store: SyncHttpMemoryStore,
    namespace: str,
) -> None:
    memory = PrintedMemoryTool(store, scope=namespace)
    print(f"You: {SAYS}")
    runner = client.beta.messages.tool_runner(
        model=options.model,
        max_tokens=1024,
        tools=[memory],
        messages=[{"role": "user", "content": SAYS}],
    )
    for message in runner:  # each of Claude's turns; the runner answers its tool calls
        for block in message.content:
            if block.type == "text":
                print(f"Claude: {block.text}")

    print(f"\nThe files of {namespace} in memoryhub, with their history:")
    for record in store.search(scope=namespace, key_prefix="/memories/"):
        versions = store.history(scope=namespace, key=record.key)
        print(f"{len(versions)} versions of {record.key}, newest first:")
        for version in versions:
            print(f"  v{version.version} ({version.cause}): {version.value!r}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("MEMORYHUB_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--key", default=os.environ.get("MEMORYHUB_API_KEY"))
    parser.add_argument("--domain", default=os.environ.get("MEMORYHUB_DOMAIN", "support"))
    parser.add_argument("--user", default="alice")
    parser.add_argument("--model", default="claude-sonnet-4-5")
    parser.add_argument("--keep", action="store_true", help="keep the files afterwards")
    parser.add_argument(
        "--offline", action="store_true", help="a scripted stand-in answers for Claude"
    )
    options = parser.parse_args()
    if not options.key:
        sys.exit("Give the API key with --key or MEMORYHUB_API_KEY.")
    try:
        if options.offline:
            from offline_model import serving

            with serving(turns=offline_turns(options.user)) as model:
                main(options, anthropic.Anthropic(base_url=model.url, api_key="offline"))
        else:
            main(options, anthropic.Anthropic())
    except Exception as exc:  # one line, not a traceback
        sys.exit(f"the run failed: {type(exc).__name__}: {exc}")
