"""Conversational evaluation sets: LoCoMo when a copy is at hand, and two generated ones.

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

**Timeline** (``generate_timeline()``, deterministic from a seed, built without looking
at LoCoMo's questions or scores). Two speakers over some 32 sessions spread across more
than a year (every 9 to 18 days, evenings), without small talk glued to each fact:
each speaker has four facts that *change* (city, employer, partner, pet, favourite
series: two or three values each, a value held seven sessions at least) and two that do
not (hometown, sister, instrument). The first value is said in passing ("My flat in
Lisbon is freezing"), each later one as a change ("The movers dropped the last boxes at
my new place in Oslo"), never with the question's words ("Where does Ana live now?").
Distractors name the same entities without stating the fact: the next value talked
about before it comes true ("I've been browsing flats in Oslo"), values of the same
attribute said in passing (often one the other speaker held or will hold), the other speaker's
reply naming the value. ``Conversation.facts`` lists every statement under its fact's
key, oldest first. Questions:

* *single-hop*: a fact that never changed;
* *supersession-current*: the value now, evidence the latest statement;
* *supersession-past*: the value before the next one ("Where was Ana living before the
  move to Oslo?"), evidence the earlier statement;
* *temporal*: when a value began ("When did Ana relocate to Oslo?"), evidence the change;
* *as-of*: the value in a month wholly inside its validity ("Who employed Ana in March
  2023?", ``Question.as_of`` the 15th of that month), evidence the statement then in force;
* *multi-hop*: what held when something else changed ("Where was Ana living when the
  beagle arrived?"), evidence the change and the statement of the other fact then in force.
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
    #: The moment the question asks about ("in March 2023"): asked with ``as_of``.
    as_of: datetime | None = None


@dataclass
class Conversation:
    id: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    #: Statements of facts, oldest first: (the fact's key, e.g. "Ana:city", the turn that
    #: states its value); a later statement of a key supersedes the earlier one.
    facts: list[tuple[str, str]] = field(default_factory=list)


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


# --- timeline: facts that change -----------------------------------------------------------

_CITIES = [
    "Oslo",
    "Lisbon",
    "Porto",
    "Valencia",
    "Gdansk",
    "Tucson",
    "Leeds",
    "Utrecht",
    "Ghent",
    "Tallinn",
    "Bologna",
    "Montreal",
    "Adelaide",
    "Bergen",
    "Krakow",
    "Halifax",
]
_EMPLOYERS = [
    "Northwind",
    "Brightline",
    "Halcyon Labs",
    "Copperleaf",
    "Bluefin Logistics",
    "Redwood Health",
    "Tidewater Bank",
    "Lumen Studio",
    "Granite Works",
    "Silverpine",
    "Orchard Foods",
    "Kestrel Air",
]
_PARTNERS = ["Sam", "Noor", "Mateo", "Yara", "Felix", "Leila", "Theo", "Rosa", "Idris", "Marta"]
_PET_KINDS = ["beagle", "tabby", "cockatiel", "rabbit", "tortoise", "greyhound", "ferret"]
_SHOWS = [
    "Harbour Lights",
    "The Quiet Orbit",
    "Saltmarsh",
    "Glass Kingdom",
    "Night Ferry",
    "Paper Tigers",
    "Ironwood",
    "The Long Table",
    "Static Bloom",
    "Copper Canyon",
]


@dataclass(frozen=True)
class _Attribute:
    """A fact about a person that changes: how it is asked (``now``, ``past`` with the
    value that came next, ``when`` a value began, ``asof`` a month) and how it is said
    (``first``: the value the conversation opens with, ``change``: a new value), with
    distractors (``mention``: another value of the pool, said in passing; ``plan``: the
    next value before it comes true; ``reply``: the other speaker about the value)."""

    name: str
    values: list[str]
    now: list[str]
    past: list[str]
    when: list[str]
    asof: list[str]
    first: list[str]
    change: list[str]
    mention: list[str]
    plan: list[str]
    reply: list[str]


_CHANGING = [
    _Attribute(
        "city",
        _CITIES,
        now=["Where does {p} live now?", "Which city is {p} based in these days?"],
        past=[
            "Where was {p} living before the move to {next}?",
            "Which city did {p} call home before relocating to {next}?",
        ],
        when=["When did {p} relocate to {v}?", "When did {p} pack up and go to {v}?"],
        asof=["Which city was {p} living in during {month}?", "Where was {p}'s home in {month}?"],
        first=[
            "My flat in {v} is freezing, the radiators are useless.",
            "Walked along the river in {v} after dinner, I really like my neighbourhood.",
            "Rent in {v} went up again, but I'm not leaving my street.",
        ],
        change=[
            "The movers dropped the last boxes at my new place in {v} yesterday!",
            "Signed the lease and handed in my old keys, I'm officially a resident of {v} now.",
            "First night in the new apartment in {v}, sleeping on a mattress on the floor.",
        ],
        mention=[
            "We spent a long weekend in {x}, lovely, but I could never settle there.",
            "My cousin keeps sending me pictures from {x}.",
            "There was a documentary about {x} on last night, beautiful old harbour.",
        ],
        plan=[
            "I've been browsing flats in {v}, just daydreaming though.",
            "A friend asked if I'd ever consider {v}. Maybe one day?",
        ],
        reply=["{v}! How is the commute from there?", "Send me photos of {v}, I've never been."],
    ),
    _Attribute(
        "employer",
        _EMPLOYERS,
        now=["Who does {p} work for now?", "Which company employs {p} at the moment?"],
        past=[
            "Who was {p}'s employer before {next}?",
            "Which company did {p} work for prior to joining {next}?",
        ],
        when=["When did {p} take the job at {v}?", "When did {p} begin working for {v}?"],
        asof=["Which company was {p} working for in {month}?", "Who employed {p} in {month}?"],
        first=[
            "Another late night at {v}, the quarterly deadline is brutal.",
            "My team at {v} ordered pizza for the release, small wins.",
        ],
        change=[
            "First week at {v} done, the onboarding never ends but people are kind.",
            "Handed in my notice last month, and today I got my badge at {v}.",
            "Signed the offer from {v}! New desk, new colleagues, new commute.",
        ],
        mention=[
            "{x} is hiring again, half my friends applied.",
            "Saw an ad for {x} on the bus, their logo is everywhere.",
            "My brother had an interview at {x}, fingers crossed for him.",
        ],
        plan=[
            "A recruiter from {v} messaged me, probably nothing.",
            "Had coffee with someone from {v}, they seem nice.",
        ],
        reply=["{v}, wow. Do you like the people there?", "{v} sounds intense, are you ok?"],
    ),
    _Attribute(
        "partner",
        _PARTNERS,
        now=["Who is {p} dating now?", "Who is {p}'s partner these days?"],
        past=[
            "Who was {p} seeing before {next}?",
            "Who was {p} in a relationship with prior to {next}?",
        ],
        when=["When did {p} get together with {v}?", "When did {p} start going out with {v}?"],
        asof=[
            "Who was {p} romantically involved with in {month}?",
            "Who was {p} dating in {month}?",
        ],
        first=[
            "{v} cooked me dinner for our anniversary, I'm a lucky one.",
            "{v} and I spent Sunday doing a jigsaw, very domestic of us.",
        ],
        change=[
            "So... I met someone. {v}, at a barbecue, and we've had four dates already.",
            "It's official, {v} and I are a couple, we told our families this weekend.",
            "After the breakup I didn't expect this, but {v} asked me out and I said yes.",
        ],
        mention=[
            "{x} from my climbing group says hi.",
            "Bumped into {x} at the market, we were at school together.",
            "My colleague {x} just got back from holiday.",
        ],
        plan=[
            "There's this person, {v}, at my pottery class, we keep chatting.",
            "{v} lent me a book last week, we'll see.",
        ],
        reply=["{v} sounds lovely, I want to meet them!", "Aww, you and {v}! Tell me everything."],
    ),
    _Attribute(
        "pet",
        _PET_KINDS,
        now=["What animal does {p} have at home now?", "What pet lives with {p} these days?"],
        past=[
            "Which animal did {p} have before the {next}?",
            "What pet did {p} keep prior to getting the {next}?",
        ],
        when=["When did {p} get the {v}?", "When did the {v} come to live with {p}?"],
        asof=["What pet did {p} have in {month}?", "Which animal was living with {p} in {month}?"],
        first=[
            "My {v} knocked a plant off the shelf again, chaos gremlin.",
            "Took my {v} for a checkup, the vet says healthy as anything.",
        ],
        change=[
            "Meet our new {v} from the shelter, brought it home on Saturday!",
            "We adopted a {v}! It follows me from room to room.",
        ],
        mention=[
            "My neighbour's {x} made a racket all night.",
            "Saw a {x} at the park that looked like a cartoon.",
        ],
        plan=[
            "The shelter website has a {v} up for adoption, so cute.",
            "Thinking about whether a {v} would suit my routine.",
        ],
        reply=["A {v}! Pictures please.", "Aw, a {v}, how is it settling in?"],
    ),
    _Attribute(
        "show",
        _SHOWS,
        now=["What series is {p} hooked on now?", "What is {p}'s current favourite TV show?"],
        past=[
            "What show was {p} into before {next}?",
            "Which series did {p} love before discovering {next}?",
        ],
        when=["When did {p} get into {v}?", "When did {p} start watching {v}?"],
        asof=[
            "What series was {p} obsessed with in {month}?",
            "What was {p} binge-watching in {month}?",
        ],
        first=[
            "Rewatched the whole of {v} again, it's my comfort thing.",
            "Can't stop thinking about that finale of {v}, what a twist.",
        ],
        change=[
            "Put on {v} on a whim and now it's all I think about.",
            "Binged six episodes of {v} last night, I have no self control.",
        ],
        mention=[
            "Everyone at work keeps talking about {x}, I haven't started it.",
            "The trailer for {x} looked silly to me.",
        ],
        plan=[
            "Someone recommended {v} to me, it's on my list.",
            "Is {v} any good? I keep seeing it.",
        ],
        reply=["{v}? I couldn't get past the pilot!", "Oh {v} is so good, no spoilers."],
    ),
]
# Facts that do not change: (key, question, statements, values).
_STABLE = [
    (
        "hometown",
        "Where is {p} originally from?",
        [
            "Back when I was a kid in {v} we biked to the lake every summer.",
            "Growing up in {v} was quiet, mostly fields and one bakery.",
        ],
        _CITIES,
    ),
    (
        "sibling",
        "What is the name of {p}'s sister?",
        [
            "My sister {v} visited, we stayed up talking till 3am.",
            "{v}, my big sis, just had twins!",
        ],
        ["Lena", "Ruth", "Carmen", "Asha", "Dora", "Ivy"],
    ),
    (
        "instrument",
        "What instrument does {p} play?",
        [
            "Finally got through a whole piece on the {v} without a mistake!",
            "I've been practising the {v} every evening, my neighbours must hate me.",
        ],
        ["cello", "trumpet", "banjo", "piano", "clarinet", "harp"],
    ),
]
_FILLER = [
    *_SMALL_TALK,
    "What did you get up to at the weekend?",
    "I tried that new bakery, the cinnamon buns are dangerous.",
    "Work was fine, nothing to report really.",
    "I finally cleaned out the fridge, a real achievement.",
    "My phone screen cracked again, I'm hopeless.",
    "Have you read anything good lately?",
    "I went for a long walk, it cleared my head.",
    "Sorry I was slow to reply, busy days.",
    "We should plan a trip together sometime.",
    "I'm trying to drink less coffee, failing.",
    "The power went out for an hour yesterday.",
    "My knee is acting up after that run.",
]
_HELLO = ["Hey, long time!", "Hi! Got a minute?", "Morning!", "Evening, how's things?"]
_BYE = ["Gotta run, talk soon!", "Night night!", "Speak next week?", "Take care of yourself."]


def _spread(rng: random.Random, count: int, sessions: int, gap: int) -> list[int]:
    """``count`` sorted sessions, the first among the first four, each next at least
    ``gap`` later."""
    first = rng.randrange(4)
    room = sessions - first - 1 - (count - 1) * gap
    rest = sorted(rng.sample(range(max(room, count - 1) + 1), count - 1))
    return [first, *(first + gap * (n + 1) + r for n, r in enumerate(rest))]


def _month_inside(start: datetime, end: datetime) -> datetime | None:
    """The 15th at noon of a calendar month lying wholly in [start, end), the one nearest
    the middle; None if no month fits."""
    months = []
    year, month = start.year, start.month
    while True:
        first = datetime(year, month, 1, tzinfo=UTC)
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        following = datetime(year, month, 1, tzinfo=UTC)
        if following > end:
            break
        if first >= start:
            months.append(first)
    if not months:
        return None
    return months[len(months) // 2].replace(day=15, hour=12)


def generate_timeline(
    conversations: int = 8, sessions: int = 32, seed: int = 23
) -> list[Conversation]:
    """A deterministic set of facts that change (see the module docstring)."""
    rng = random.Random(seed)
    result = []
    for c in range(conversations):
        a, b = rng.sample(_NAMES, 2)
        conversation = Conversation(id=f"tl-{c}")
        # Session dates: every 9 to 18 days, evenings, from a start in 2022 or 2023.
        when = datetime(2022, 6, 1, 19, 0, tzinfo=UTC) + timedelta(days=rng.randrange(300))
        dates = []
        for _ in range(sessions):
            dates.append(when + timedelta(minutes=rng.randrange(-90, 150)))
            when += timedelta(days=rng.randrange(9, 19))
        # What each session says, in groups kept together (a statement and its reply):
        # (speaker, text, tag), a tag naming the fact a turn states.
        plan: list[list[list[tuple[str, str, tuple | None]]]] = [[] for _ in range(sessions)]
        chains: dict[tuple[str, str], list[str]] = {}
        for person in (a, b):
            other = b if person == a else a
            for attribute in rng.sample(_CHANGING, 4):
                length = rng.choice((2, 3, 3))
                values = rng.sample(attribute.values, length)
                chains[(person, attribute.name)] = values
                for n, (value, s) in enumerate(
                    zip(values, _spread(rng, length, sessions, 7), strict=True)
                ):
                    text = rng.choice(attribute.change if n else attribute.first).format(v=value)
                    group = [(person, text, ("fact", person, attribute.name, n))]
                    if rng.random() < 0.6:
                        group.append((other, rng.choice(attribute.reply).format(v=value), None))
                    plan[s].append(group)
                    if n and rng.random() < 0.7:  # talked about before it happens
                        early = s - rng.randint(1, 3)
                        said = rng.choice(attribute.plan).format(v=value)
                        plan[early].append([(person, said, None)])
            for key, _question, statements, values in rng.sample(_STABLE, 2):
                value = rng.choice(values)
                chains[(person, key)] = [value]
                text = rng.choice(statements).format(v=value)
                plan[rng.randrange(sessions)].append([(person, text, ("fact", person, key, 0))])
        # Distractors: other values of the same attributes said in passing, often one the
        # other speaker held, holds or will hold.
        for s in range(sessions):
            for _ in range(rng.randint(2, 4)):
                person = rng.choice((a, b))
                attribute = rng.choice(_CHANGING)
                # The other speaker's: a value this one never held, said without
                # contradicting what this one says of themselves.
                held = chains.get((b if person == a else a, attribute.name))
                pool = held if held and rng.random() < 0.4 else attribute.values
                text = rng.choice(attribute.mention).format(x=rng.choice(pool))
                plan[s].append([(person, text, None)])
        stated: dict[tuple[str, str, int], Turn] = {}
        for s in range(sessions):
            groups = list(plan[s])
            for _ in range(rng.randint(5, 9)):
                groups.append([(rng.choice((a, b)), _small_talk(rng), None)])
            rng.shuffle(groups)
            lines = [(rng.choice((a, b)), rng.choice(_HELLO), None)]
            lines += [line for group in groups for line in group]
            lines.append((rng.choice((a, b)), rng.choice(_BYE), None))
            moment = dates[s]
            for n, (speaker, text, tag) in enumerate(lines, start=1):
                moment += timedelta(seconds=rng.randrange(20, 120))
                turn = Turn(f"D{s + 1}:{n}", speaker, text, s + 1, moment)
                conversation.turns.append(turn)
                if tag is not None:
                    stated[tag[1:]] = turn
        end = conversation.turns[-1].occurred_at
        conversation.facts = sorted(
            ((f"{person}:{key}", turn.id) for (person, key, _), turn in stated.items()),
            key=lambda fact: _order(conversation, fact[1]),
        )
        conversation.questions = _timeline_questions(rng, chains, stated, end)
        result.append(conversation)
    return result


def _order(conversation: Conversation, turn_id: str) -> int:
    session, n = turn_id[1:].split(":")
    return int(session) * 10_000 + int(n)


def _timeline_questions(
    rng: random.Random,
    chains: dict[tuple[str, str], list[str]],
    stated: dict[tuple[str, str, int], Turn],
    end: datetime,
) -> list[Question]:
    attributes = {attribute.name: attribute for attribute in _CHANGING}
    stable = {key: question for key, question, _, _ in _STABLE}
    questions: list[Question] = []
    for (person, key), values in chains.items():
        turns = [stated[(person, key, n)] for n in range(len(values))]
        if key in stable:
            questions.append(Question(stable[key].format(p=person), (turns[0].id,), "single-hop"))
            continue
        attribute = attributes[key]
        questions.append(
            Question(
                rng.choice(attribute.now).format(p=person), (turns[-1].id,), "supersession-current"
            )
        )
        for n in range(1, len(values)):
            past = rng.choice(attribute.past).format(p=person, next=values[n])
            questions.append(Question(past, (turns[n - 1].id,), "supersession-past"))
            when = rng.choice(attribute.when).format(p=person, v=values[n])
            questions.append(Question(when, (turns[n].id,), "temporal"))
        for n, turn in enumerate(turns):
            until = turns[n + 1].occurred_at if n + 1 < len(turns) else end
            moment = _month_inside(turn.occurred_at, until)
            if moment is None:
                continue
            text = rng.choice(attribute.asof).format(p=person, month=f"{moment:%B %Y}")
            questions.append(Question(text, (turn.id,), "as-of", as_of=moment))
    # Multi-hop: what held when something else began (two turns of two sessions).
    pairs = [
        ("pet", "city", "Where was {p} living when the {v} arrived?"),
        ("partner", "employer", "Which company was {p} working for when {p} met {v}?"),
        ("city", "employer", "Who employed {p} at the time of the move to {v}?"),
        ("employer", "partner", "Who was {p} dating when {p} started at {v}?"),
        ("show", "city", "Which city was {p} in when {p} discovered {v}?"),
    ]
    for (person, key), values in chains.items():
        for event, held, template in pairs:
            if key != event or (person, held) not in chains:
                continue
            for n in range(1, len(values)):
                moment = stated[(person, event, n)]
                said = [stated[(person, held, m)] for m in range(len(chains[(person, held)]))]
                before = [turn for turn in said if turn.session < moment.session]
                # Not when the other fact changed in the same session: which held is unclear.
                if before and all(turn.session != moment.session for turn in said):
                    text = template.format(p=person, v=values[n])
                    questions.append(Question(text, (moment.id, before[-1].id), "multi-hop"))
    return questions
