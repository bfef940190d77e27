"""A query's token budget (``max_tokens``) and the ``usage`` every answer reports.

Tokens are estimated, not counted with a model's tokenizer (none is shipped, and none is
downloaded at run time): :func:`estimate_tokens` is one token per four characters,
rounded up, the rule of thumb OpenAI documents for English text. It is an estimate in
either direction for other languages and for code; leave room in the budget.

:func:`pack` keeps what the agent reads within the budget, measured on the grounding
block the answer carries (``render_grounding``: its header, each hit, each context turn):
first the hits, best first, each that still fits (a long one is skipped, a shorter one
after it may fit); then their context turns, best hit first and nearest turn first,
while they fit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from itertools import zip_longest

from ...items import MemoryItem, Turns

__all__ = ["estimate_tokens", "pack"]


def estimate_tokens(text: str) -> int:
    """About one token per four characters (rounded up; empty text: 0)."""
    return math.ceil(len(text) / 4)


def pack(
    items: Sequence[MemoryItem], max_tokens: int, render: Callable[[list[MemoryItem]], str]
) -> tuple[list[MemoryItem], bool]:
    """The items (and context turns) that fit in ``max_tokens`` of ``render``'s text, in
    their order; and whether anything was left out."""

    def fits(selection: list[MemoryItem]) -> bool:
        return estimate_tokens(render(selection)) <= max_tokens

    bare = [
        dataclasses.replace(item, context=Turns()) if item.context is not None else item
        for item in items
    ]
    chosen: list[int] = []
    for position in range(len(bare)):
        if fits([bare[i] for i in [*chosen, position]]):
            chosen.append(position)
    packed = {position: bare[position] for position in chosen}
    left_out = len(chosen) < len(items)
    for position in chosen:
        context = items[position].context
        if context is None:
            continue
        before: list[MemoryItem] = []
        after: list[MemoryItem] = []
        # Nearest first: the turn just before, the one just after, then further out.
        pairs = zip_longest(
            [("before", turn) for turn in reversed(context.before)],
            [("after", turn) for turn in context.after],
        )
        order = [each for pair in pairs for each in pair if each is not None]
        for side_name, turn in order:
            trial_before = [turn, *before] if side_name == "before" else before
            trial_after = [*after, turn] if side_name == "after" else after
            trial = dataclasses.replace(
                packed[position], context=Turns(tuple(trial_before), tuple(trial_after))
            )
            if fits([trial if i == position else packed[i] for i in chosen]):
                packed[position], before, after = trial, trial_before, trial_after
            else:
                left_out = True
    return [packed[position] for position in chosen], left_out
