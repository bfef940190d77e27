"""Conversational evaluation sets: LoCoMo when a copy is at hand, and a generated one.

A set is conversations (dated sessions of turns between two people) and questions
whose evidence turns are annotated; retrieval is scored by *evidence recall@k*, the
share of a question's evidence turns among the first k results.

**LoCoMo** (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
Agents", ACL 2024; https://github.com/snap-research/locomo, ``data/locomo10.zip``): 10
conversations, 5,882 turns, 1,986 questions of which 1,540 are answerable (category 5,
adversarial, has no evidence by design and is left out). It is not copied into this
repository: the snapshot we read states no licence, and later releases of the dataset
are CC BY-NC 4.0 (non-commercial), so the harness reads it from a path
(``--locomo PATH``, the zip or an unpacked directory). Categories as the LoCoMo paper
numbers them: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop.

**Generated** (``generate()``, deterministic from a seed, no licence question: this
module is the recipe). Persons with attributes and events, talked about across dated
sessions by two speakers, with small talk in between; questions are written with other
words than the evidence turns (synonyms, a pronoun for the name in the follow-up turn)
so neither words nor vectors find them trivially:

* *single-hop*: one attribute stated in one turn ("What does Ana do for a living?" →
  "Ana: I started as a nurse at St Mary's last spring.");
* *multi-hop*: an answer spread over two turns of two sessions (the pet named in one, its
  illness in another: "Which of Ana's pets got sick?");
* *temporal*: when an event happened, evidence the turn that tells it (answered with the
  session date: memoryhub's ``occurred_at``).
"""

from __future__ import annotations

import json
import random
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


@dataclass(frozen=True)
class Turn:
    id: str  # unique in its conversation (LoCoMo's dia_id, e.g. "D1:3")
    speaker: str
    text: str
    session: int
    occurred_at: datetime

    @property
    def content(self) -> str:
        """What is written to memory: the speaker and what they said (a passage without
        a speaker: its text)."""
        return f"{self.speaker}: {self.text}" if self.speaker else self.text


@dataclass(frozen=True)
class Question:
    text: str
    evidence: tuple[str, ...]
    category: str


@dataclass
class Conversation:
    id: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


# --- LoCoMo --------------------------------------------------------------------------------

_SESSION = re.compile(r"session_(\d+)")


def _locomo_files(path: Path) -> Iterator[tuple[str, bytes]]:
    if path.is_file() and path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            for name in sorted(archive.namelist()):
                if name.endswith(".json"):
                    yield name, archive.read(name)
    else:
        for file in sorted(path.rglob("*.json")):
            yield str(file), file.read_bytes()


def load_locomo(path: Path) -> list[Conversation]:
    """The conversations of a LoCoMo copy (``locomo10.json`` or the per-conversation
    files of ``locomo10.zip``); questions without evidence are left out."""
    found: list[dict] = []
    for name, data in _locomo_files(path):
        loaded = json.loads(data)
        for n, sample in enumerate(loaded if isinstance(loaded, list) else [loaded]):
            sample.setdefault("_id", f"{Path(name).stem}" + (f"-{n}" if n else ""))
            found.append(sample)
    conversations = []
    for sample in found:
        body = sample.get("conversation", sample)
        conversation = Conversation(id=str(sample.get("sample_id", sample["_id"])))
        for key, turns in body.items():
            match = _SESSION.fullmatch(key)
            if not match or not isinstance(turns, list):
                continue
            session = int(match.group(1))
            when = datetime.strptime(body[f"{key}_date_time"], "%I:%M %p on %d %B, %Y")
            for offset, turn in enumerate(turns):
                text = turn["text"]
                if turn.get("blip_caption"):
                    text += f" [shares {turn['blip_caption']}]"
                conversation.turns.append(
                    Turn(
                        id=turn["dia_id"],
                        speaker=turn["speaker"],
                        text=text,
                        session=session,
                        occurred_at=when.replace(tzinfo=UTC) + timedelta(seconds=30 * offset),
                    )
                )
        known = {turn.id for turn in conversation.turns}
        for question in sample["qa"]:
            category = question.get("category")
            evidence = tuple(e for e in question.get("evidence", ()) if e in known)
            if category not in CATEGORIES or not evidence:
                continue
            conversation.questions.append(
                Question(str(question["question"]), evidence, CATEGORIES[category])
            )
        conversations.append(conversation)
    return conversations


# --- generated -----------------------------------------------------------------------------

_NAMES = [
    "Ana",
    "Ben",
    "Chloe",
    "Dev",
    "Elena",
    "Farid",
    "Greta",
    "Hiro",
    "Ines",
    "Jonas",
    "Kemi",
    "Luca",
    "Maya",
    "Nils",
    "Omar",
    "Priya",
]
# attribute: (question, [statement templates], values): statements avoid the question's
# content words where natural language allows.
_ATTRIBUTES = [
    (
        "What does {p} do for work?",
        [
            "I started working as a {v} last spring, long shifts but I love it.",
            "Being a {v} means I'm on my feet all day, exhausting.",
        ],
        [
            "nurse",
            "teacher",
            "carpenter",
            "pharmacist",
            "architect",
            "firefighter",
            "baker",
            "accountant",
        ],
    ),
    (
        "Where did {p} grow up?",
        [
            "Back when I was a kid in {v} we biked to the lake every summer.",
            "Growing up in {v} was quiet, mostly fields and one bakery.",
        ],
        ["Lisbon", "Oslo", "Nairobi", "Osaka", "Porto", "Valencia", "Gdansk", "Tucson"],
    ),
    (
        "What instrument is {p} learning?",
        [
            "I've been practising the {v} every evening, my neighbours must hate me.",
            "Finally got through a whole song on the {v} without a mistake!",
        ],
        ["cello", "violin", "trumpet", "banjo", "piano", "clarinet", "drums", "harp"],
    ),
    (
        "What is {p}'s favourite food?",
        [
            "Nothing beats a big plate of {v}, I could eat it every day.",
            "I cooked {v} again tonight, honestly my favourite, it never gets old.",
        ],
        ["ramen", "paella", "pierogi", "tacos", "lasagna", "curry", "sushi", "falafel"],
    ),
]
_PETS = ["dog", "cat", "parrot", "rabbit", "tortoise", "hamster"]
_PET_NAMES = ["Biscuit", "Pepper", "Mango", "Rocket", "Olive", "Ziggy", "Noodle", "Pickle"]
# Some statements share a word with the question ("marathon"), some only meaning.
_EVENTS = [
    ("run a marathon", "I finally ran the whole marathon, my legs are jelly."),
    ("go to a pottery class", "Spent the afternoon at the wheel shaping clay, so messy."),
    ("visit the aquarium", "We saw the jellyfish tanks and a huge octopus at the aquarium."),
    ("move to a new flat", "Boxes everywhere, the new place has a balcony at last."),
    ("adopt a puppy", "We brought the little furball home from the shelter."),
    ("start a book club", "Eight of us met to discuss the first novel, our club is born."),
]
_OPENERS = ["Hey!", "Oh nice.", "Haha.", "Wow.", "Hmm.", "Right?", "Ugh.", "Yes!", "Aw.", "Ok."]
_SMALL_TALK = [
    "How have you been?",
    "Good to hear from you, it's been a while.",
    "That sounds great, tell me more!",
    "Haha, same here honestly.",
    "Oh wow, I had no idea.",
    "Anyway, how is your week going?",
    "The weather has been awful lately.",
    "I'm so tired, work has been a lot.",
    "Let's catch up again soon!",
    "Take care, talk soon!",
    "My sister says hi.",
    "I keep meaning to call you more often.",
    "The traffic this morning was unreal.",
    "Coffee is the only thing keeping me going.",
    "Did you watch the game last night?",
    "I need a holiday, seriously.",
]


def known_items(passages: int = 3000, questions: int = 300, seed: int = 11) -> list[Conversation]:
    """The main harness's retrieval task as a set: stdlib docstring passages, each
    question a passage's first sentence lightly reworded (:mod:`benchmarks.corpus`),
    its evidence that passage. One "conversation" of passages, no dates that matter."""
    from benchmarks.corpus import known_item_query
    from benchmarks.corpus import passages as corpus

    rng = random.Random(seed)
    texts = corpus(passages)
    when = datetime(2024, 1, 1, tzinfo=UTC)
    conversation = Conversation(id="known-items")
    conversation.turns = [
        Turn(f"P{n}", "", text, 1, when + timedelta(seconds=n)) for n, text in enumerate(texts)
    ]
    for n in rng.sample(range(len(texts)), questions):
        conversation.questions.append(
            Question(known_item_query(texts[n], rng), (f"P{n}",), "known-item")
        )
    return [conversation]


def _small_talk(rng: random.Random) -> str:
    return f"{rng.choice(_OPENERS)} {rng.choice(_SMALL_TALK)}"


def generate(conversations: int = 6, sessions: int = 12, seed: int = 7) -> list[Conversation]:
    """A deterministic conversational set (see the module docstring for the recipe)."""
    rng = random.Random(seed)
    result = []
    for c in range(conversations):
        a, b = rng.sample(_NAMES, 2)
        conversation = Conversation(id=f"gen-{c}")
        start = datetime(2023, 1, 2, 18, 0, tzinfo=UTC) + timedelta(days=rng.randrange(200))
        facts: list[tuple[str, Question]] = []
        # What each session will mention: attributes, a pet, its illness, events.
        plan: list[list[tuple[str, str, Question | None]]] = [[] for _ in range(sessions)]
        for person in (a, b):
            for question, statements, values in _ATTRIBUTES:
                value = rng.choice(values)
                text = rng.choice(statements).format(v=value)
                q = Question(question.format(p=person), (), "single-hop")
                plan[rng.randrange(sessions)].append((person, text, q))
            pet, pet_name = rng.choice(_PETS), rng.choice(_PET_NAMES)
            first, second = sorted(rng.sample(range(sessions), 2))
            multi = Question(
                f"Which of {person}'s pets got sick, and what kind is it?", (), "multi-hop"
            )
            plan[first].append(
                (person, f"Meet {pet_name}, my new {pet}! Chewing everything.", multi)
            )
            plan[second].append((person, f"Rough week, {pet_name} was sick at the vet.", multi))
            for event, statement in rng.sample(_EVENTS, 2):
                q = Question(f"When did {person} {event}?", (), "temporal")
                plan[rng.randrange(sessions)].append((person, statement, q))
        evidence: dict[int, list[str]] = {}
        questions: dict[int, Question] = {}
        for s in range(sessions):
            when = start + timedelta(days=7 * s + rng.randrange(3), minutes=rng.randrange(600))
            lines: list[tuple[str, str, Question | None]] = []
            for _ in range(rng.randrange(3, 6)):
                lines.append((rng.choice((a, b)), _small_talk(rng), None))
            for item in plan[s]:
                lines.insert(rng.randrange(len(lines) + 1), item)
                # The other speaker answers, sometimes with a pronoun: context, no evidence.
                lines.insert(
                    lines.index(item) + 1,
                    ((b if item[0] == a else a), _small_talk(rng), None),
                )
            for n, (speaker, text, question) in enumerate(lines, start=1):
                turn = Turn(f"D{s + 1}:{n}", speaker, text, s + 1, when + timedelta(seconds=40 * n))
                conversation.turns.append(turn)
                if question is not None:
                    evidence.setdefault(id(question), []).append(turn.id)
                    questions[id(question)] = question
        for key, question in questions.items():
            conversation.questions.append(
                Question(question.text, tuple(evidence[key]), question.category)
            )
        del facts
        result.append(conversation)
    return result
