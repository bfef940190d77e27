"""The built-in extractor: a few English sentence patterns and near-duplicate counting,
no model, no network, the same answer for the same input."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from .base import (
    MAX_FACT_CHARS,
    Episode,
    Fact,
    Operation,
    chronological,
    validate_operations,
)

__all__ = ["BuiltinExtractor"]

# A sentence ends at . ! ? ; followed by a space, or at a line break; "3.12" stays whole.
SENTENCE_BREAK = re.compile(r"(?<=[.!?;])\s+|\s*\n\s*")
ATTRIBUTE_WORDS = r"[^\W\d_][\w'-]*(?:\s+[\w'-]+){0,3}?"
POSSESSIVE = re.compile(
    rf"\b(?:my|our)\s+(?P<attribute>{ATTRIBUTE_WORDS})(?:\s+(?:is|are)\s+|'s\s+)(?P<value>.+)$",
    re.IGNORECASE,
)
KEY_VALUE = re.compile(r"^(?P<attribute>[^\W\d_][\w'-]*(?:[ \t][\w'-]+){0,3}):\s+(?P<value>\S.*)$")
COPULA = re.compile(
    rf"^(?:the\s+)?(?P<attribute>{ATTRIBUTE_WORDS})\s+(?:is|are)\s+(?P<value>.+)$",
    re.IGNORECASE,
)
LEADING_FILLER = re.compile(r"^(?:(?:now|actually|still)\s+)+", re.IGNORECASE)
TRAILING_FILLER = re.compile(r"(?:\s+(?:now|actually|these days))+$", re.IGNORECASE)
TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
CORRECTION = re.compile(r"\b(?:actually|sorry|i meant|correction|typo|i misspoke)\b", re.IGNORECASE)
NEGATIONS = frozenset({"not", "no", "never", "nor", "cannot", "nothing", "nobody"})
MAX_VALUE_CHARS = 200


def normalise_attribute(text: str) -> str:
    """``"My  Favourite Colour"`` → ``"favourite colour"``."""
    words = text.replace("\u2019", "'").lower().split()
    while words and words[0] in ("my", "our", "the"):
        words = words[1:]
    return " ".join(words)


def normalise_value(text: str) -> str:
    return " ".join(text.casefold().split())


def _same(left: str, right: str) -> bool:
    return normalise_value(left) == normalise_value(right)


def sentences(text: str) -> Iterator[str]:
    for sentence in SENTENCE_BREAK.split(text):
        if sentence.strip():
            yield sentence.strip()


def tokens(text: str) -> frozenset[str]:
    return frozenset(TOKEN.findall(text.replace("\u2019", "'").lower()))


def negated(words: frozenset[str]) -> bool:
    return any(word in NEGATIONS or word.endswith("n't") for word in words)


def jaccard(left: frozenset[str], right: frozenset[str]) -> float:
    return len(left & right) / len(left | right) if left or right else 0.0


@dataclass
class Statement:
    """One sentence of one episode; ``attribute`` is set when it states one."""

    episode_id: str
    text: str
    attribute: str = ""
    value: str = ""
    words: frozenset[str] = field(default_factory=frozenset)


@dataclass
class Cluster:
    """Near-duplicate statements: ``seed`` is compared, the last phrasing is kept."""

    seed: Statement
    members: list[Statement]

    @property
    def episode_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(member.episode_id for member in self.members))


class BuiltinExtractor:
    """Consolidates episodes with English sentence patterns and near-duplicate counting.

    Each episode (oldest first: by ``created_at`` when all have one, else as given) is
    split into sentences at ``. ! ? ;`` followed by a space and at line breaks. Questions
    (sentences ending in ``?``) are skipped. Each remaining sentence is read once, by the
    first rule that fits:

    1. **Attributes.** ``my|our <attribute> is|are|'s <value>`` anywhere in the sentence,
       ``<attribute>: <value>`` (one to four words before a colon and a space), or
       ``[the] <attribute> is|are <value>`` when ``<attribute>`` is already known (an
       existing fact's key, or the attribute its content states by the first two
       patterns, or one stated earlier in these episodes). The attribute is lowercased,
       whitespace-collapsed and loses a leading my/our/the; the value is the rest of the
       sentence, less its final ``. ! ;``, a leading now/actually/still and a trailing
       now/actually/these days; a value over 200 characters is not an attribute. The
       latest value of each attribute wins, and its sources are the episodes that state
       that value: a new attribute is an ``add`` with key ``<attribute>`` and content
       ``<attribute>: <value>``; a known one with a different value (compared
       case-insensitively) is a ``supersede`` of the first fact that holds it (the
       attribute changed: the old value stays as history, closed when the new one was
       said), or an ``update`` of it when the winning sentence reads as a correction
       (``actually``, ``sorry``, ``I meant``, ``correction``, ``typo``); the same value is a
       ``none`` on that fact, citing the episodes that restate it.
    2. **Repetition.** Any other sentence of at least ``min_tokens`` words (lowercased
       ``[a-z0-9]`` runs, ``don't`` is one word; no stemming, no stop words) and at most
       2,000 characters is compared by Jaccard similarity of its word set. At or above
       ``similarity`` to an existing fact without an operation yet, it restates that
       fact: a ``none`` citing its episodes, with ``metadata["count"]`` = the fact's
       count (1 if it has none) plus the number of new episodes. Otherwise it joins the
       first group whose first sentence it is that similar to, or starts a group. A group
       spread over at least ``min_episodes`` distinct episodes becomes one ``add`` with
       the latest phrasing, no key, and ``metadata["count"]`` = that number of episodes.
       A sentence with a negation (not, no, never, nor, cannot, nothing, nobody, or a
       word ending in n't) is never similar to one without.

    Everything else produces no operation. It does not: resolve pronouns or who "my"
    refers to (every statement is about the speaker of the episode); understand
    negation, tense, hedging or conditionals ("my car is not red" stores ``car: not
    red``; "if my car is red" still matches); delete anything; merge spellings or
    synonyms (``favourite colour`` and ``favorite color`` are two attributes); read any
    language but English; or look at ``metadata`` of episodes. Attribute keys are
    unique among the adds it proposes.
    """

    name = "builtin"
    model = ""

    def __init__(
        self, *, similarity: float = 0.75, min_episodes: int = 2, min_tokens: int = 3
    ) -> None:
        if not 0.0 < similarity <= 1.0:
            raise ValueError("similarity must be in (0, 1]")
        if min_episodes < 1 or min_tokens < 1:
            raise ValueError("min_episodes and min_tokens must be at least 1")
        self.similarity = similarity
        self.min_episodes = min_episodes
        self.min_tokens = min_tokens

    def __repr__(self) -> str:
        return f"BuiltinExtractor(similarity={self.similarity})"

    def extract(self, episodes: Sequence[Episode], facts: Sequence[Fact]) -> list[Operation]:
        known = self._facts_by_attribute(facts)
        statements = self._statements(episodes, set(known))
        operations = self._attribute_operations(statements, known)
        named = {operation.fact_id for operation in operations}
        operations += self._repetition_operations(
            [statement for statement in statements if not statement.attribute],
            [fact for fact in facts if fact.id not in named],
        )
        return validate_operations(operations, episodes, facts)

    @staticmethod
    def _parse(sentence: str, known: Collection[str]) -> tuple[str, str] | None:
        """``(attribute, value)`` if the sentence states one, else ``None``."""
        sentence = sentence.rstrip(".!; \t")
        for pattern in (POSSESSIVE, KEY_VALUE, COPULA):
            match = pattern.search(sentence)
            if match is None:
                continue
            attribute = normalise_attribute(match["attribute"])
            if pattern is COPULA and attribute not in known:
                continue
            value = TRAILING_FILLER.sub("", LEADING_FILLER.sub("", match["value"].strip()))
            if attribute and value and len(value) <= MAX_VALUE_CHARS:
                return attribute, value
        return None

    def _facts_by_attribute(self, facts: Sequence[Fact]) -> dict[str, tuple[Fact, str]]:
        """Each known attribute → (the first fact holding it, its value or "")."""
        known: dict[str, tuple[Fact, str]] = {}
        for fact in facts:
            parsed = self._parse(fact.content, {})
            if parsed is not None:
                known.setdefault(parsed[0], (fact, parsed[1]))
            if fact.key:
                known.setdefault(normalise_attribute(fact.key), (fact, ""))
        return known

    def _statements(self, episodes: Sequence[Episode], known: set[str]) -> list[Statement]:
        """Every sentence but questions, oldest first; ``known`` grows as attributes are
        stated."""
        statements = []
        for episode in chronological(episodes):
            for sentence in sentences(episode.content):
                if sentence.endswith("?"):
                    continue
                parsed = self._parse(sentence, known)
                if parsed is None:
                    statements.append(Statement(episode.id, sentence, words=tokens(sentence)))
                    continue
                attribute, value = parsed
                known.add(attribute)
                statements.append(Statement(episode.id, sentence, attribute, value))
        return statements

    def _attribute_operations(
        self, statements: Sequence[Statement], known: Mapping[str, tuple[Fact, str]]
    ) -> list[Operation]:
        """Each attribute's values in the order they were stated, a run of the same
        value as one: the first run adds the attribute (or restates, corrects or
        supersedes the known fact), and each later run supersedes the one before."""
        runs: dict[str, list[list[Statement]]] = {}  # in the order attributes were stated
        for statement in statements:
            if not statement.attribute:
                continue
            values = runs.setdefault(statement.attribute, [])
            if values and _same(values[-1][-1].value, statement.value):
                values[-1].append(statement)
            else:
                values.append([statement])
        operations = []
        for attribute, values in runs.items():
            key = attribute
            if attribute in known:
                fact, value = known[attribute]
                if fact.key is None:
                    # A keyless fact's successor has a key no later operation can name:
                    # the latest value wins, sourced by every statement of it.
                    latest = values[-1][-1].value
                    values = [[s for run in values for s in run if _same(s.value, latest)]]
                elif len(values) > 1 and _same(value, values[0][-1].value):
                    values = values[1:]  # restated, then changed: the change is what counts
                key = fact.key or attribute
            for position, run in enumerate(values):
                content = f"{attribute}: {run[-1].value}"
                sources = tuple(dict.fromkeys(s.episode_id for s in run))
                if position > 0:
                    operations.append(Operation.supersede(None, content, sources, key=key))
                elif attribute in known:
                    operations.append(self._change(known[attribute], run[-1], content, sources))
                else:
                    operations.append(Operation.add(content, sources, key=attribute))
        return operations

    @staticmethod
    def _change(
        known: tuple[Fact, str], winner: Statement, content: str, sources: tuple[str, ...]
    ) -> Operation:
        """What a known fact's first run of statements does to it: restates it, corrects
        it (the sentence says so) or supersedes it."""
        fact, value = known
        if _same(value, winner.value):
            return Operation.none(fact.id, sources)
        if CORRECTION.search(winner.text):
            return Operation.update(fact.id, content, sources)
        return Operation.supersede(fact.id, content, sources)

    def _repetition_operations(
        self, statements: Sequence[Statement], facts: Sequence[Fact]
    ) -> list[Operation]:
        fact_words = [(fact, tokens(fact.content)) for fact in facts]
        restated: dict[str, list[str]] = {}
        clusters: list[Cluster] = []
        for statement in statements:
            if len(statement.words) < self.min_tokens or len(statement.text) > MAX_FACT_CHARS:
                continue
            fact = next((f for f, words in fact_words if self._alike(statement.words, words)), None)
            if fact is not None:
                restated.setdefault(fact.id, []).append(statement.episode_id)
                continue
            cluster = next(
                (c for c in clusters if self._alike(statement.words, c.seed.words)), None
            )
            if cluster is None:
                clusters.append(Cluster(seed=statement, members=[statement]))
            else:
                cluster.members.append(statement)
        operations = []
        for fact, _ in fact_words:
            if fact.id in restated:
                sources = tuple(dict.fromkeys(restated[fact.id]))
                count = fact.metadata.get("count", 1)
                count = count if isinstance(count, int) and not isinstance(count, bool) else 1
                operations.append(
                    Operation.none(fact.id, sources, metadata={"count": count + len(sources)})
                )
        for cluster in clusters:
            sources = cluster.episode_ids
            if len(sources) >= self.min_episodes:
                operations.append(
                    Operation.add(
                        cluster.members[-1].text, sources, metadata={"count": len(sources)}
                    )
                )
        return operations

    def _alike(self, left: frozenset[str], right: frozenset[str]) -> bool:
        return negated(left) == negated(right) and jaccard(left, right) >= self.similarity
