"""Real English text available offline: docstrings of the standard library, as passages.

Docstrings are read with ``ast`` (nothing is imported). Each passage is a paragraph of
40 to 1,200 characters. A known-item query is a passage's first sentence, lightly
reworded (lower case, a few stop words dropped, two words swapped): it must find its
passage.
"""

from __future__ import annotations

import ast
import random
import re
import sysconfig
from collections.abc import Iterator
from pathlib import Path

STOP = {"the", "a", "an", "of", "to", "is", "and", "this", "that", "in", "for"}
_SENTENCE = re.compile(r"^(.+?[.!?])(\s|$)", re.S)


def _docstrings(root: Path) -> Iterator[str]:
    for path in sorted(root.rglob("*.py")):
        if "test" in path.parts or "idlelib" in path.parts or "site-packages" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                text = ast.get_docstring(node)
                if text:
                    yield text


def passages(limit: int) -> list[str]:
    """Up to ``limit`` distinct passages (repeated with a part number if there are fewer)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen: set[str] = set()
    found: list[str] = []
    for docstring in _docstrings(root):
        for paragraph in re.split(r"\n\s*\n", docstring):
            text = " ".join(paragraph.split())
            if 40 <= len(text) <= 1200 and text not in seen and sum(c.isalpha() for c in text) > 30:
                seen.add(text)
                found.append(text)
                if len(found) >= limit:
                    return found
    base = list(found)
    part = 2
    while len(found) < limit:
        found.extend(f"{text} (part {part})" for text in base[: limit - len(found)])
        part += 1
    return found


def known_item_query(passage: str, rng: random.Random) -> str:
    match = _SENTENCE.match(passage)
    sentence = match.group(1) if match else passage[:200]
    words = [w for w in re.findall(r"\w+", sentence.lower()) if w not in STOP][:24]
    if len(words) > 3:
        i = rng.randrange(len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)
