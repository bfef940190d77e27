"""Real English text available offline: docstrings of the standard library, then of the
installed packages (the benchmark's environment: Django, NumPy, torch, ...), as passages.

The standard library holds about 11,000 distinct passages; the packages add about
190,000 (the count depends on their versions; the report gives the number used). Past
them a passage repeats with a part number. Docstrings are read with ``ast`` (nothing is
imported). Each passage is a paragraph of
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


def _roots() -> list[Path]:
    """The standard library first, then the installed packages."""
    paths = sysconfig.get_paths()
    return [Path(paths["stdlib"]), Path(paths["purelib"])]


def _docstrings(root: Path, *, packages: bool = False) -> Iterator[str]:
    for path in sorted(root.rglob("*.py")):
        parts = set(path.relative_to(root).parts)
        if {"test", "idlelib", "site-packages"} & parts or ("tests" in parts and packages):
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
    seen: set[str] = set()
    found: list[str] = []
    for index, root in enumerate(_roots()):
        for docstring in _docstrings(root, packages=index > 0):
            for paragraph in re.split(r"\n\s*\n", docstring):
                text = " ".join(paragraph.split())
                if not text.isprintable():  # a NUL or a control character: not prose
                    continue
                if (
                    40 <= len(text) <= 1200
                    and text not in seen
                    and sum(c.isalpha() for c in text) > 30
                ):
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
    if not words:  # a first "sentence" of symbols or stop words only: the passage's words
        words = [w for w in re.findall(r"\w+", passage.lower()) if w not in STOP][:24]
    if len(words) > 3:
        i = rng.randrange(len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)
