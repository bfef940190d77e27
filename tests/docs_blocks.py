"""The documentation's code blocks as a reader runs them.

:func:`blocks` reads a page's fenced blocks; :func:`check_answers` holds a shell block's
output to the answers its ``# …`` comments show; run as a program
(``python -m tests.docs_blocks FILE``), this module runs one Python block the way a
reader pastes it: top-level ``await`` allowed, and each expression whose line ends in a
comment holding a Python literal (``store.get(…).value  # "EUR"``) must equal it.
"""

from __future__ import annotations

import ast
import asyncio
import io
import os
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    body: str

    @property
    def first(self) -> str:
        return next(line for line in self.body.splitlines() if line.strip())

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.first})"


def blocks(
    path: Path, languages: frozenset[str] = frozenset({"sh", "bash", "python"})
) -> list[Block]:
    text = path.read_text()
    found = []
    for match in _FENCE.finditer(text):
        if match.group(1) in languages:
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(path.name, line, match.group(1), match.group(2)))
    return found


def shell_parts(body: str) -> tuple[str, str]:
    """A shell block's commands, and its expected answers (its whole-line comments)."""
    commands = "\n".join(line for line in body.splitlines() if not line.startswith("#"))
    expected = "\n".join(line[1:] for line in body.splitlines() if line.startswith("#"))
    return commands, expected


#: "name":value pairs of an expected answer, without placeholders (… or <>) or timings.
_PAIR = re.compile(r'"(\w+)":("[^"…<]*"|-?\d+|true|false)(?=[,}\]])')
_CONTENT = re.compile(r'"content":"((?:[^"\\]|\\.)*)"')


def check_answers(commands: str, expected: str, output: str) -> int:
    """Assert that ``output`` holds each pair the expected answers show, and that the
    answers with items rank first, in order, the records the comments show first; the
    number of checks made."""
    checked = 0
    for name, value in _PAIR.findall(expected):
        assert f'"{name}":{value}' in output, f"{commands}\n{expected}\n---\n{output}"
        checked += 1
    wanted = [
        _CONTENT.search(line)
        for line in expected.splitlines()
        if line.lstrip().startswith('{"items"')
    ]
    answers = [line for line in output.splitlines() if line.startswith('{"items"')]
    firsts = [match.group(1) for match in wanted if match is not None]
    # In order; an answer the block shows no comment for is passed over.
    ranked = iter(_CONTENT.search(answer) for answer in answers)
    for want in firsts:
        assert any(got is not None and got.group(1) == want for got in ranked), (
            f"no answer ranks {want!r} first, after the ones before it\n{commands}\n---\n{output}"
        )
        checked += 1
    return checked


def _literal_comments(source: str) -> dict[int, Any]:
    """Line number → the Python literal shown for the expression ending on that line: in
    a comment after it on the same line, or alone on the next line."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        text = token.string[1:].strip()
        alone = token.line.strip().startswith("#")
        for end in range(len(text), 0, -1):  # "# 'x'   newest first": the literal first
            try:
                literal = ast.literal_eval(text[:end])
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            found[token.start[0] - 1 if alone else token.start[0]] = literal
            break
    return found


class _Expectations(ast.NodeTransformer):
    """``value  # literal`` becomes ``_expect(value, line)``."""

    def __init__(self, literals: dict[int, Any]) -> None:
        self.literals, self.count = literals, 0

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        end = node.end_lineno or node.lineno
        if end not in self.literals:
            return node
        self.count += 1
        call = ast.Call(
            func=ast.Name("_expect", ast.Load()),
            args=[node.value, ast.Constant(end)],
            keywords=[],
        )
        return ast.copy_location(ast.Expr(call), node)


def run(source: str, namespace: dict[str, Any]) -> int:
    """Run a block as a reader pastes it; the number of expectations it met."""
    tree = ast.parse(source)
    literals = _literal_comments(source)
    expectations = _Expectations(literals)
    tree = ast.fix_missing_locations(expectations.visit(tree))
    met: list[int] = []

    def expect(value: Any, line: int) -> None:
        literal = literals[line]
        assert value == literal, f"line {line}: {value!r}, where the page shows {literal!r}"
        met.append(line)

    namespace["_expect"] = expect
    code = compile(tree, "<block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)
    if asyncio.iscoroutine(result):
        asyncio.run(result)
    assert len(met) == expectations.count, (
        f"{expectations.count - len(met)} shown result(s) never reached"
    )
    return len(met)


def main(path: str) -> None:
    """Run the block in ``path`` after its prelude (``path.prelude``, if any), with
    ``URL`` and ``KEY`` from the environment."""
    namespace: dict[str, Any] = {"__name__": "__block__"}
    url, key = os.environ["MEMORYHUB_URL"], os.environ.get("KEY", "")
    source = Path(path).read_text().replace("https://memory.example.com", url)
    source = source.replace("http://127.0.0.1:8000", url).replace('"mh_…"', "KEY")
    namespace.update(URL=url, KEY=key)
    prelude = Path(f"{path}.prelude")
    if prelude.exists():
        exec(prelude.read_text(), namespace)
    met = run(source, namespace)
    print(f"ran; {met} shown result(s) met")


if __name__ == "__main__":
    main(sys.argv[1])
