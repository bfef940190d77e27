"""Consolidation extractors: the invariants every answer keeps, the built-in patterns, and
the OpenAI-compatible extractor against a real local HTTP server that answers
``/chat/completions`` from a script."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memoryhub.consolidation import (
    MAX_FACT_CHARS,
    BuiltinExtractor,
    Episode,
    ExtractionError,
    Extractor,
    ExtractorUnavailable,
    Fact,
    MalformedAnswer,
    Omitted,
    OpenAICompatibleExtractor,
    Operation,
    extractor_from_env,
    validate_operations,
)

# --- validate_operations ----------------------------------------------------------------

EPISODES = [Episode("e1", "My favourite colour is green."), Episode("e2", "Hello.")]
FACTS = [Fact("f1", "favourite colour: blue"), Fact("f2", "name: Bob")]


def test_valid_operations_come_back_as_a_list():
    operations = (
        Operation.add("likes tea", ["e1", "e2"], key="drink"),
        Operation.update("f1", "favourite colour: green", ["e1"]),
        Operation.delete("f2"),
    )
    assert validate_operations(operations, EPISODES, FACTS) == list(operations)


@pytest.mark.parametrize(
    ("operation", "reason"),
    [
        (Operation.add("  ", ["e1"]), "content is empty"),
        (Operation.add("x" * (MAX_FACT_CHARS + 1), ["e1"]), "2001 characters"),
        (Operation.add("likes tea", []), "no source episodes"),
        (Operation.update("f1", "favourite colour: green", []), "no source episodes"),
        (Operation.add("likes tea", ["e1", "e9"]), "unknown source episode 'e9'"),
        (Operation.delete("f1", ["e9"]), "unknown source episode 'e9'"),
        (Operation.update("f9", "favourite colour: green", ["e1"]), "unknown fact 'f9'"),
        (Operation.delete("f9"), "unknown fact 'f9'"),
        (Operation.none("f9"), "unknown fact 'f9'"),
        (Operation("add", content="likes tea", fact_id="f1", sources=("e1",)), "names no fact"),
        (Operation("delete", content="gone", fact_id="f1"), "carries content"),
        (Operation("update", "c", fact_id="f1", sources=("e1",), key="k"), "only an add"),
        (Operation.add("likes tea", ["e1"], key=" "), "key is blank"),
        (Operation.add("likes tea", ["e1"], key="k" * 256), "too long"),
    ],
)
def test_each_broken_invariant_is_refused(operation, reason):
    with pytest.raises(ExtractionError, match=reason):
        validate_operations([operation], EPISODES, FACTS)


def test_two_operations_on_one_fact_are_refused():
    operations = [Operation.update("f1", "favourite colour: green", ["e1"]), Operation.delete("f1")]
    with pytest.raises(ExtractionError, match=r"operation 1 .*'f1' named twice"):
        validate_operations(operations, EPISODES, FACTS)


def test_two_adds_of_one_key_are_refused():
    operations = [
        Operation.add("a", ["e1"], key="colour"),
        Operation.add("b", ["e2"], key="colour"),
    ]
    with pytest.raises(ExtractionError, match="'colour' added twice"):
        validate_operations(operations, EPISODES, FACTS)


def test_an_unknown_op_cannot_be_built():
    with pytest.raises(ValueError, match="op must be one of"):
        Operation("merge")


# --- the built-in extractor -------------------------------------------------------------


def episodes(*texts: str) -> list[Episode]:
    start = datetime(2025, 1, 1, tzinfo=UTC)
    return [
        Episode(f"e{n}", text, created_at=start + timedelta(minutes=n))
        for n, text in enumerate(texts, 1)
    ]


def test_builtin_is_an_extractor_without_a_model():
    extractor = BuiltinExtractor()
    assert isinstance(extractor, Extractor)
    assert (extractor.name, extractor.model) == ("builtin", "")


def test_builtin_adds_keyed_facts_from_attribute_statements():
    operations = BuiltinExtractor().extract(
        episodes("Hi! My favourite colour is blue.", "Email: bob@example.com", "My name's Bob."),
        [],
    )
    assert operations == [
        Operation.add("favourite colour: blue", ["e1"], key="favourite colour"),
        Operation.add("email: bob@example.com", ["e2"], key="email"),
        Operation.add("name: Bob", ["e3"], key="name"),
    ]


def test_builtin_each_change_of_a_value_supersedes_the_one_before():
    facts = [Fact("f1", "favourite colour: blue", derived_from=("old",), key="favourite colour")]
    operations = BuiltinExtractor().extract(
        episodes(
            "My favourite colour is red.",
            "Favourite colour is green now.",  # "X is Y" counts: the attribute is known
            "Nice weather. My favourite colour is green!",
        ),
        facts,
    )
    assert operations == [
        Operation.supersede("f1", "favourite colour: red", ["e1"]),
        Operation.supersede(None, "favourite colour: green", ["e2", "e3"], key="favourite colour"),
    ]
    assert validate_operations(operations, episodes("a", "b", "c"), facts) == operations


def test_builtin_a_keyless_fact_takes_the_latest_value_citing_the_episodes_that_state_it():
    facts = [Fact("f1", "favourite colour: blue", derived_from=("old",))]
    operations = BuiltinExtractor().extract(
        episodes(
            "My favourite colour is red.",
            "Favourite colour is green now.",
            "Nice weather. My favourite colour is green!",
        ),
        facts,
    )
    assert operations == [Operation.supersede("f1", "favourite colour: green", ["e2", "e3"])]


def test_builtin_a_sentence_that_says_it_corrects_is_an_update():
    facts = [Fact("f1", "favourite colour: blue", key="favourite colour")]
    operations = BuiltinExtractor().extract(
        episodes("Sorry, typo: my favourite colour is blau."), facts
    )
    assert operations == [Operation.update("f1", "favourite colour: blau", ["e1"])]


def test_a_supersede_by_key_needs_an_earlier_operation_holding_the_key():
    with pytest.raises(ExtractionError, match="no earlier operation wrote key"):
        validate_operations(
            [Operation.supersede(None, "city: Lyon", ["e1"], key="city")], episodes("x"), []
        )


def test_builtin_orders_episodes_by_time_not_by_position():
    start = datetime(2025, 1, 1, tzinfo=UTC)
    given = [
        Episode("late", "My city is Lyon.", created_at=start + timedelta(days=1)),
        Episode("early", "My city is Paris.", created_at=start),
    ]
    assert BuiltinExtractor().extract(given, []) == [
        Operation.add("city: Paris", ["early"], key="city"),
        Operation.supersede(None, "city: Lyon", ["late"], key="city"),
    ]


def test_builtin_reads_x_is_y_for_an_attribute_stated_earlier_in_the_batch():
    operations = BuiltinExtractor().extract(
        episodes("My hometown is Nantes.", "Hometown is Brest now."), []
    )
    assert operations == [
        Operation.add("hometown: Nantes", ["e1"], key="hometown"),
        Operation.supersede(None, "hometown: Brest", ["e2"], key="hometown"),
    ]


def test_builtin_restating_an_attribute_leaves_the_fact_as_it_is():
    facts = [Fact("f1", "Bob's favourite colour", key="favourite colour")]
    operations = BuiltinExtractor().extract(
        episodes("my favourite colour is BLUE"), [Fact("f2", "favourite colour: blue"), *facts]
    )
    assert operations == [Operation.none("f2", ["e1"])]


def test_builtin_merges_a_statement_repeated_across_episodes_with_a_count():
    operations = BuiltinExtractor().extract(
        episodes(
            "I love hiking in the Alps.",
            "Good morning. I really love hiking in the Alps.",
            "I love hiking in the alps",
            "I do not love hiking in the Alps.",  # a negation is never a near-duplicate
        ),
        [],
    )
    assert operations == [
        Operation.add("I love hiking in the alps", ["e1", "e2", "e3"], metadata={"count": 3})
    ]


def test_builtin_counts_a_restated_fact_without_changing_it():
    facts = [Fact("f1", "I love hiking in the Alps", metadata={"count": 4})]
    operations = BuiltinExtractor().extract(episodes("I really love hiking in the Alps!"), facts)
    assert operations == [Operation.none("f1", ["e1"], metadata={"count": 5})]


def test_builtin_proposes_nothing_for_chit_chat_questions_and_one_off_remarks():
    operations = BuiltinExtractor().extract(
        episodes(
            "Hello there!",
            "What is my favourite colour? Is it true that my car is red?",
            "The sky is blue today.",  # "X is Y" only for an attribute already known
            "I went to the cinema yesterday.",
            "ok thanks",
            "ok thanks",
        ),
        [Fact("f1", "favourite colour: blue")],
    )
    assert operations == []


def test_builtin_output_keeps_the_invariants():
    texts = ["My pet is a cat. I like tea a lot.", "My pet is a dog.", "I like tea a lot!"]
    facts = [Fact("f1", "pet: a cat"), Fact("f2", "I like tea a lot.", metadata={"count": 1})]
    operations = BuiltinExtractor().extract(episodes(*texts), facts)
    assert operations == [
        Operation.supersede("f1", "pet: a dog", ["e2"]),
        Operation.none("f2", ["e1", "e3"], metadata={"count": 3}),
    ]
    assert validate_operations(operations, episodes(*texts), facts) == operations


# --- the OpenAI-compatible extractor, against a real local HTTP server -------------------


@dataclass
class Reply:
    """One scripted answer: ``content`` becomes choices[0].message.content; ``body``
    replaces the whole body; ``hang`` holds the request until the test ends."""

    status: int = 200
    content: str = ""
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


def answer(*operations: dict) -> Reply:
    return Reply(content=json.dumps({"operations": list(operations)}))


def op(op: str, **fields: object) -> dict:
    return {"op": op, "content": None, "fact_id": None, "sources": [], "key": None} | fields


class FakeChatAPI(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ChatHandler)
        self.script: list[Reply] = []
        self.requests: list[dict] = []
        self.headers_seen: list[dict] = []
        self.release = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class ChatHandler(BaseHTTPRequestHandler):
    server: FakeChatAPI

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        self.server.headers_seen.append(dict(self.headers))
        reply = self.server.script.pop(0) if self.server.script else Reply(status=599)
        if self.path != "/v1/chat/completions":
            reply = Reply(status=404)
        if reply.hang:
            self.server.release.wait(timeout=30)
            return
        if reply.body is not None:
            payload = reply.body.encode()
        elif reply.status == 200:
            message = {"role": "assistant", "content": reply.content}
            payload = json.dumps({"choices": [{"index": 0, "message": message}]}).encode()
        else:
            payload = b'{"error": {"message": "scripted failure"}}'
        self.send_response(reply.status)
        for name, value in {"Content-Type": "application/json", **reply.headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def api() -> Iterator[FakeChatAPI]:
    server = FakeChatAPI()
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


class Sleeps(list[float]):
    """Stands in for time.sleep and records each delay."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def make(api: FakeChatAPI, sleeps: Sleeps, **options: object) -> OpenAICompatibleExtractor:
    settings: dict = {"api_key": "sk-test", "sleep": sleeps, "backoff": 0.25} | options
    return OpenAICompatibleExtractor(api.url, "chat-model", **settings)


TURNS = [
    Episode("ep-a", "I moved to Lyon last month."),
    Episode("ep-b", "My favourite colour is green these days."),
]
KNOWN = [Fact("fact-1", "Lives in Paris."), Fact("fact-2", "Favourite colour is blue.")]


def user_prompt(request: dict) -> str:
    return request["messages"][-1]["content"]


def test_a_good_answer_becomes_validated_operations(api, sleeps):
    api.script = [
        answer(
            op("update", fact_id="fact-1", content="Lives in Lyon.", sources=["ep-a"]),
            op("delete", fact_id="fact-2", sources=["ep-b"], content="ignored"),
            op("add", content="Favourite colour is green.", sources=["ep-b"], key="colour"),
        )
    ]
    extractor = make(api, sleeps)
    assert isinstance(extractor, Extractor)
    assert extractor.extract(TURNS, KNOWN) == [
        Operation.update("fact-1", "Lives in Lyon.", ["ep-a"]),
        Operation.delete("fact-2", ["ep-b"]),
        Operation.add("Favourite colour is green.", ["ep-b"], key="colour"),
    ]
    assert [a.outcome for a in extractor.last_attempts] == ["ok"]
    assert extractor.last_error is None
    assert extractor.last_omitted == Omitted()
    assert sleeps == []
    assert (extractor.name, extractor.model) == ("openai", "chat-model")
    assert "sk-test" not in repr(extractor)


def test_the_request_names_the_model_the_schema_and_every_id(api, sleeps):
    api.script = [answer()]
    make(api, sleeps).extract(TURNS, KNOWN)
    (request,) = api.requests
    assert (request["model"], request["temperature"]) == ("chat-model", 0.0)
    assert api.headers_seen[0]["Authorization"] == "Bearer sk-test"
    response_format = request["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["strict"] is True
    item = response_format["json_schema"]["schema"]["properties"]["operations"]["items"]
    assert item["additionalProperties"] is False
    assert sorted(item["required"]) == ["content", "fact_id", "key", "op", "sources"]
    assert item["properties"]["op"]["enum"] == ["add", "update", "supersede", "delete", "none"]
    system, user = request["messages"]
    assert system["role"] == "system"
    words = ('"add"', '"update"', '"supersede"', '"delete"', '"none"')
    assert all(word in system["content"] for word in words)
    for item_id in ("ep-a", "ep-b", "fact-1", "fact-2"):
        assert f'"id": "{item_id}"' in user["content"]
    assert "I moved to Lyon last month." in user["content"]


def test_the_prompt_keeps_the_newest_episodes_and_most_similar_facts_within_budget(api, sleeps):
    start = datetime(2025, 1, 1, tzinfo=UTC)
    many = [
        Episode(f"ep-{n:03}", f"turn {n:03} " + "x" * 300, created_at=start + timedelta(hours=n))
        for n in range(40)
    ]
    facts = [Fact(f"fact-{n:03}", f"fact {n:03} " + "y" * 300) for n in range(40)]
    huge = Episode("ep-huge", "z" * 10_000, created_at=start + timedelta(days=30))
    api.script = [answer()]
    extractor = make(api, sleeps, max_prompt_chars=8_000)
    extractor.extract([huge, *reversed(many)], facts)
    (request,) = api.requests
    assert sum(len(m["content"]) for m in request["messages"]) <= 8_000
    prompt = user_prompt(request)
    omitted = extractor.last_omitted
    shown = [e.id for e in many if f'"id": "{e.id}"' in prompt]
    assert shown and omitted.episode_ids == tuple(e.id for e in many if e.id not in shown)
    assert shown == [e.id for e in many[-len(shown) :]]  # the newest were kept
    assert prompt.index(shown[0]) < prompt.index(shown[-1]) < prompt.index("ep-huge")
    shown_facts = [f.id for f in facts if f'"id": "{f.id}"' in prompt]
    assert shown_facts == [f.id for f in facts[: len(shown_facts)]]  # the most similar
    assert omitted.fact_ids == tuple(f.id for f in facts[len(shown_facts) :])
    assert omitted.truncated_ids == ("ep-huge",)
    for item_id in omitted.episode_ids + omitted.fact_ids:
        assert item_id not in prompt  # left out whole, never in part
    assert "z" * 100 in prompt and "z" * 5_000 not in prompt


def test_malformed_json_is_retried(api, sleeps):
    api.script = [
        Reply(content='{"operations": [{"op": "add",'),
        answer(op("none", fact_id="fact-1")),
    ]
    extractor = make(api, sleeps)
    assert extractor.extract(TURNS, KNOWN) == [Operation.none("fact-1")]
    assert [a.outcome for a in extractor.last_attempts] == ["malformed", "ok"]
    assert "not JSON" in extractor.last_attempts[0].detail
    assert sleeps == [0.25]


@pytest.mark.parametrize(
    ("reply", "detail"),
    [
        (Reply(content='{"facts": []}'), 'no "operations" list'),
        (answer(op("merge", sources=["ep-a"])), "op must be one of"),
        (answer(op("add", content="x", sources="ep-a")), "sources must be a list"),
        (answer(op("add", content=7, sources=["ep-a"])), "content must be a string"),
        (Reply(body='{"id": "chatcmpl-1", "choices": []}'), "no choices"),
        (Reply(body="<html>proxy error</html>"), "response is not JSON"),
        (answer(op("add", content="x", sources=[])), "no source episodes"),
    ],
)
def test_an_answer_off_the_schema_is_malformed(api, sleeps, reply, detail):
    api.script = [reply, reply]
    extractor = make(api, sleeps, max_attempts=2)
    with pytest.raises(MalformedAnswer, match=f"gave up after 2 attempts: .*{detail}"):
        extractor.extract(TURNS, KNOWN)
    assert [a.outcome for a in extractor.last_attempts] == ["malformed", "malformed"]
    assert isinstance(extractor.last_error, MalformedAnswer)


def test_an_answer_naming_an_unknown_fact_is_malformed(api, sleeps):
    invented = answer(op("update", fact_id="fact-9", content="Lives in Lyon.", sources=["ep-a"]))
    api.script = [invented, invented, invented]
    extractor = make(api, sleeps)
    with pytest.raises(MalformedAnswer, match="unknown fact 'fact-9'"):
        extractor.extract(TURNS, KNOWN)
    assert len(api.requests) == 3
    assert sleeps == [0.25, 0.5]


def test_an_answer_naming_a_fact_the_prompt_left_out_is_malformed(api, sleeps):
    facts = [Fact(f"fact-{n:03}", "y" * 1_500) for n in range(10)]
    left_out = answer(op("delete", fact_id="fact-009"))
    api.script = [left_out]
    extractor = make(api, sleeps, max_attempts=1, max_prompt_chars=6_000)
    with pytest.raises(MalformedAnswer, match="unknown fact 'fact-009'"):
        extractor.extract(TURNS, facts)
    assert "fact-009" in extractor.last_omitted.fact_ids


def test_a_429_waits_as_long_as_retry_after_says(api, sleeps):
    api.script = [Reply(status=429, headers={"Retry-After": "7"}), answer()]
    extractor = make(api, sleeps)
    assert extractor.extract(TURNS, KNOWN) == []
    assert sleeps == [7.0]
    assert [(a.outcome, a.retry_after) for a in extractor.last_attempts] == [
        ("rate_limited", 7.0),
        ("ok", None),
    ]


def test_a_retry_after_longer_than_max_sleep_is_handed_to_the_caller(api, sleeps):
    api.script = [Reply(status=429, headers={"Retry-After": "120"}), answer()]
    with pytest.raises(ExtractorUnavailable) as raised:
        make(api, sleeps, max_sleep=30.0).extract(TURNS, KNOWN)
    assert raised.value.retry_after == 120.0
    assert sleeps == []
    assert len(api.requests) == 1


def test_a_500_is_retried_with_backoff(api, sleeps):
    api.script = [Reply(status=500), Reply(status=503), answer()]
    extractor = make(api, sleeps)
    assert extractor.extract(TURNS, KNOWN) == []
    assert sleeps == [0.25, 0.5]
    assert [a.status for a in extractor.last_attempts] == [500, 503, 200]


def test_a_timeout_is_retried(api, sleeps):
    api.script = [Reply(hang=True), answer(op("none", fact_id="fact-2", sources=["ep-b"]))]
    extractor = make(api, sleeps, timeout=0.2)
    assert extractor.extract(TURNS, KNOWN) == [Operation.none("fact-2", ["ep-b"])]
    assert [a.outcome for a in extractor.last_attempts] == ["timeout", "ok"]


def test_running_out_of_attempts_on_timeouts_is_unavailable(api, sleeps):
    api.script = [Reply(hang=True), Reply(hang=True)]
    extractor = make(api, sleeps, timeout=0.2, max_attempts=2)
    with pytest.raises(ExtractorUnavailable, match=r"gave up after 2 attempts: .*Timeout"):
        extractor.extract(TURNS, KNOWN)
    assert extractor.last_error is not None and extractor.last_error.retry_after is None


def test_running_out_of_attempts_on_429_keeps_the_last_retry_after(api, sleeps):
    api.script = [Reply(status=429, headers={"Retry-After": "2"})] * 3
    extractor = make(api, sleeps)
    with pytest.raises(ExtractorUnavailable, match="gave up after 3 attempts: HTTP 429") as raised:
        extractor.extract(TURNS, KNOWN)
    assert raised.value.retry_after == 2.0
    assert sleeps == [2.0, 2.0]


def test_a_client_error_is_not_retried(api, sleeps):
    api.script = [Reply(status=400)]
    extractor = make(api, sleeps)
    with pytest.raises(ExtractionError, match="HTTP 400") as raised:
        extractor.extract(TURNS, KNOWN)
    assert type(raised.value) is ExtractionError
    assert len(api.requests) == 1
    assert [a.outcome for a in extractor.last_attempts] == ["refused"]


def test_temperature_none_is_left_out_of_the_request(api, sleeps):
    api.script = [answer()]
    make(api, sleeps, temperature=None).extract(TURNS, KNOWN)
    assert "temperature" not in api.requests[0]


def test_no_episodes_asks_nothing(api, sleeps):
    assert make(api, sleeps).extract([], KNOWN) == []
    assert api.requests == []


def test_the_key_comes_from_the_environment_unless_given(api, sleeps, monkeypatch):
    monkeypatch.setenv("MEMORYHUB_LLM_API_KEY", "sk-from-env")
    api.script = [answer()]
    OpenAICompatibleExtractor(api.url, "chat-model", sleep=sleeps).extract(TURNS, KNOWN)
    assert api.headers_seen[0]["Authorization"] == "Bearer sk-from-env"


# --- extractor_from_env -------------------------------------------------------------------


def test_without_a_model_configured_the_builtin_is_used():
    assert isinstance(extractor_from_env({}), BuiltinExtractor)


def test_a_configured_model_is_used_with_its_key(api):
    extractor = extractor_from_env(
        {
            "MEMORYHUB_LLM_BASE_URL": api.url,
            "MEMORYHUB_LLM_MODEL": "chat-model",
            "MEMORYHUB_LLM_API_KEY": "sk-env",
        }
    )
    assert isinstance(extractor, OpenAICompatibleExtractor)
    api.script = [answer()]
    extractor.extract(TURNS, KNOWN)
    assert api.requests[0]["model"] == "chat-model"
    assert api.headers_seen[0]["Authorization"] == "Bearer sk-env"


@pytest.mark.parametrize(
    "environ",
    [{"MEMORYHUB_LLM_BASE_URL": "http://llm/v1"}, {"MEMORYHUB_LLM_MODEL": "chat-model"}],
)
def test_half_a_model_configuration_is_an_error(environ):
    with pytest.raises(ValueError, match="must be set too"):
        extractor_from_env(environ)
