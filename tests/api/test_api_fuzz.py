"""Hostile input against the REST API: the write body, the query body and ``where``.

Hypothesis throws deep nesting, huge arrays, unpaired surrogates, RTL marks, emoji, NUL
bytes, numbers at the edges and wrong types at every field; hand-written cases cover what
a JSON encoder will not produce (``NaN`` literals, duplicate keys, invalid UTF-8, other
content types, oversize and mis-sized bodies). Whatever arrives, the contract holds:

* never a 5xx, and every answer is JSON;
* every 4xx has a ``code``, and a 400 has ``errors`` naming at least one field;
* never a partial write: a rejected write leaves the record count unchanged, an accepted
  one stores every item it reports;
* a body over ``MAX_BODY_BYTES`` is a JSON 413, whatever its ``Content-Length`` says and
  when it is sent chunked (the chunked and wire-level cases run against real gunicorn).
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from benchmarks.load import start_gunicorn
from memoryhub.models import MemoryRecord
from memoryhub.scope import tenant_scope
from memoryhub.services import write
from tests.factories import create_api_key
from tests.hostile import (
    ANY,
    FORGET_BODY,
    FUZZ,
    ITEM,
    QUERY_BODY,
    TEXT,
    WHERE,
    WRITE_BODY,
    field,
)

pytestmark = [
    pytest.mark.django_db,
    # Hypothesis warns that the reprs of the huge examples are huge; they are meant to be.
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning"),
]


@pytest.fixture
def api(tenant):
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    # A crash must come back as a response to inspect, not as an exception in the test.
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client


@pytest.fixture
def seeded(tenant):
    """A few records, so queries have something to find and forgets something to erase."""
    write.write(
        tenant.scope,
        [
            {"content": "Refunds take 5 days.", "metadata": {"team": "billing", "price": 5}},
            {"content": "Alice prefers EUR.", "namespace": "user:alice", "key": "currency"},
            {"content": "مرحبا 🧠 naïve café", "tags": ["unicode"], "metadata": {"n": -0.0}},
        ],
    )
    return tenant


def url(path: str) -> str:
    return f"/api/v1/domains/support/{path}"


def send(client: APIClient, path: str, body: Any) -> Any:
    """POST ``body`` as JSON; lone surrogates travel as ``\\udXXX`` escapes."""
    return send_raw(client, path, json.dumps(body))


def send_raw(client: APIClient, path: str, text: str | bytes) -> Any:
    return client.post(url(path), text, content_type="application/json")


def record_count() -> int:
    return MemoryRecord.unscoped.count()


def assert_contract(response: Any) -> dict[str, Any] | list[Any]:
    """No 5xx; JSON always; 4xx with a code; 400 with errors naming a field."""
    assert response.status_code < 500, response.content[:500]
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = json.loads(response.content)
    if response.status_code >= 400:
        assert isinstance(body, dict)
        assert isinstance(body.get("code"), str) and body["code"], body
        assert isinstance(body.get("detail"), str), body
    if response.status_code == 400:
        errors = body.get("errors")
        assert isinstance(errors, dict) and errors, body
        for field, messages in errors.items():
            assert isinstance(field, str), body  # "" only for a body key named ""
            assert isinstance(messages, list) and messages, body
            assert all(isinstance(message, str) and message for message in messages), body
    return body


# --- hypothesis: the three bodies ------------------------------------------------------------


@FUZZ
@given(body=WRITE_BODY)
@example(body={"items": [{"content": "\ud800"}]})  # the database cannot store it: no 500
@example(body={"items": [{"content": "x", "metadata": {"\udfff": 1}}]})
def test_fuzzed_writes_are_all_or_nothing(api, tenant, body):
    before = record_count()
    response = send(api, "records", body)
    answer = assert_contract(response)
    if response.status_code >= 300:
        assert record_count() == before, "a rejected write changed the record count"
        return
    assert isinstance(answer, dict) and isinstance(body, dict)
    items = body["items"]
    records = answer["records"]
    assert len(records) == len(items) * len(answer["accepted"])
    with tenant_scope(tenant.scope):
        stored = {
            str(r.pk): r for r in MemoryRecord.objects.filter(pk__in=[x["id"] for x in records])
        }
    for item, record in zip(items, records, strict=False):
        assert record["id"] in stored, "an accepted item was not stored"
        if not record["deduplicated"]:
            row = stored[record["id"]]
            assert (row.content, row.namespace) == (item["content"], item.get("namespace") or "")
    created = sum(1 for r in records if not r["deduplicated"])
    assert before <= record_count() <= before + created


@FUZZ
@given(body=QUERY_BODY)
@example(body={"query": "x", "scope": 1})  # no 500: not bound to query()'s own parameter
@example(body={"query": "x", "request": {}})
@example(body={"query": "x", "namespaces": ["\ud800"]})
def test_fuzzed_queries_never_fail_the_server(api, seeded, body):
    response = send(api, "query", body)
    answer = assert_contract(response)
    if response.status_code == 200:
        assert isinstance(answer, dict) and isinstance(answer["items"], list)


@FUZZ
@given(where=WHERE)
@example(where={"a": "\udfff"})
def test_fuzzed_where_filters_never_fail_the_server(api, seeded, where):
    response = send(api, "query", {"query": "refunds", "where": where})
    answer = assert_contract(response)
    if response.status_code == 400:
        assert isinstance(answer, dict)
        assert any(path.startswith("where") for path in answer["errors"]), answer


@FUZZ
@given(body=FORGET_BODY)
@example(body={"namespace": "\ud800"})  # no 500 from hashing it for the audit trail
@example(body={"colour": "red"})
def test_fuzzed_forgets_erase_nothing_when_refused(api, seeded, body):
    before = record_count()
    response = send(api, "forget", body)
    answer = assert_contract(response)
    if response.status_code >= 300:
        assert record_count() == before
    else:
        assert isinstance(answer, dict)
        assert record_count() == before - answer["deleted"]


UPDATE_BODY = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            name: strategy
            for name, strategy in ITEM.wrapped_strategy.optional.items()
            if name != "id"
        }
        | {"content": field(TEXT), "namespace": ANY, "source": ANY},
    ),
    ANY,
)


def snapshot(record_id: str) -> tuple[Any, ...]:
    row = MemoryRecord.unscoped.get(pk=record_id)
    return (row.content, row.key, row.kind, row.tags, row.metadata, row.expires_at, row.updated_at)


@settings(FUZZ, max_examples=max(FUZZ.max_examples // 2, 10))
@given(body=UPDATE_BODY, method=st.sampled_from(["patch", "put"]))
@example(body={"content": "\ud800"}, method="patch")
def test_fuzzed_record_updates_change_all_or_nothing(api, seeded, body, method):
    record_id = str(MemoryRecord.unscoped.get(namespace="user:alice").pk)  # it keeps it
    before = snapshot(record_id)
    response = getattr(api, method)(
        url(f"records/{record_id}"), json.dumps(body), content_type="application/json"
    )
    answer = assert_contract(response)
    if response.status_code >= 300:
        assert snapshot(record_id) == before, "a rejected update changed the record"
    else:
        assert isinstance(answer, dict) and isinstance(body, dict)
        assert answer["content"] == body.get("content", before[0])
        assert MemoryRecord.unscoped.count() == 3


# --- bodies a JSON encoder would not write ---------------------------------------------------

DEEP = 100_000


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("query", '{"query": NaN}'),
        ("query", '{"query": "x", "k": Infinity}'),
        ("query", '{"query": "x", "where": {"price": {"$gt": -Infinity}}}'),
        ("records", '{"items": [{"content": "x", "metadata": {"a": NaN}}]}'),
        ("records", '{"items": [{"content": "x", "metadata": {"a": 1e400}}]}'),
        ("query", '{"query": "x", "where": {"a": 1e400}}'),
        ("query", '{"query": "x", "min_score": 1e400}'),
        ("query", '{"query": "x", "k": 1' + "0" * 5000 + "}"),  # past int's digit limit
        ("query", '{"query": "x", "where": {"a": ' + "9" * 4000 + "}}"),
        ("query", '{"query": "x", "query": 5}'),  # a key twice: a parse error
        ("records", '{"items": [], "items": "x"}'),
        ("records", '{"items": [{"content": "a", "content": ""}]}'),
        ("query", "[" * DEEP + "]" * DEEP),
        ("query", '{"query": "x", "where": ' + '{"$and": [' * 5000 + "{}" + "]}" * 5000 + "}"),
        ("query", '{"query": "x", "where": ' + '{"$or": [' * 30 + '{"a": 1}' + "]}" * 30 + "}"),
        (
            "records",
            '{"items": [{"content": "x", "metadata": ' + '{"a": ' * 200 + "1" + "}" * 201 + "]}",
        ),
        ("query", '{"query": "\\ud800"}'),
        ("query", '{"query": "x", "where": {"\\udfff": 1}}'),
        ("query", '{"query": "x", "namespaces": ["\\ud800"]}'),
        ("records", '{"items": [{"content": "x", "metadata": {"\\ud800": "\\udc00\\ud800"}}]}'),
        ("forget", '{"namespace": "\\ud800"}'),
        ("query", '{"query": "x", "scope": 1}'),
        ("query", '{"query": "x", "request": {"k": 1}}'),
        ("query", '{"query": "x", "cls": 1}'),
        ("query", ""),
        ("query", "   "),
        ("query", "null"),
        ("query", '"query"'),
        ("query", "5"),
        ("records", "[]"),
        ("records", "\ufeff{}"),  # a byte-order mark before the JSON
        ("query", "{'query': 'x'}"),
        ("query", '{"query": "x",}'),
        ("query", "<query>x</query>"),
    ],
)
def test_raw_json_text(api, seeded, path, text):
    before = record_count()
    assert_contract(send_raw(api, path, text))
    assert record_count() == before


@pytest.mark.parametrize(
    "raw",
    [
        b'{"query": "caf\xe9"}',  # Latin-1, not UTF-8
        b'{"query": "\xed\xa0\x80"}',  # a surrogate encoded as UTF-8
        b'{"query": "\xc0\xaf"}',  # overlong
        b'{"query": "x\xff\xfe"}',
        b"\xff\xfe{\x00}\x00",
    ],
)
def test_invalid_utf8_is_a_400(api, raw):
    response = api.post(url("query"), raw, content_type="application/json")
    assert response.status_code == 400
    assert assert_contract(response)["code"] == "parse_error"


@pytest.mark.parametrize(
    ("content_type", "raw", "status"),
    [
        ("application/json; charset=utf-16", '{"query": "refunds"}'.encode("utf-16"), 200),
        ("application/json; charset=latin-1", b'{"query": "caf\xe9"}', 200),
        ("application/json; charset=nope", b'{"query": "x"}', 200),  # Django ignores it
        ("application/json; charset=bz2_codec", b'{"query": "x"}', 400),
        ("text/plain", b'{"query": "x"}', 415),
        ("application/x-www-form-urlencoded", b"query=x", 415),
        (
            "multipart/form-data; boundary=x",
            b'--x\r\nContent-Disposition: form-data; name="query"\r\n\r\nx\r\n--x--\r\n',
            415,
        ),
        ("application/xml", b"<query>x</query>", 415),
        ("application/jsonx", b'{"query": "x"}', 415),
        ("", b'{"query": "x"}', 415),
    ],
)
def test_content_types(api, seeded, content_type, raw, status):
    response = api.generic("POST", url("query"), raw, content_type=content_type)
    assert response.status_code == status, response.content
    assert_contract(response)


def test_an_empty_body_is_never_forget_everything(api, seeded):
    before = record_count()
    for content_type in ("application/json", "text/plain", ""):
        response = api.generic("POST", url("forget"), b"", content_type=content_type)
        assert response.status_code == 400
        assert_contract(response)
    assert record_count() == before


def cursor(position: str) -> str:
    """A forged pagination cursor (DRF's format: base64 of a query string)."""
    return quote(base64.b64encode(position.encode()).decode())


@pytest.mark.parametrize(
    "query_string",
    [
        "namespace=%00",
        "tag=%ED%A0%80",  # a surrogate, percent-encoded
        "key=%FF",
        "key_prefix=%25",
        "source=" + "x" * 5000,
        "kind=%00",
        "page_size=-1",
        "page_size=1" + "0" * 40,
        "cursor=garbage",
        "cursor=%00",
        "cursor=" + cursor("p=2024"),  # no 500: a position that is not a date-time
        "cursor=" + cursor("p=%00"),
        "cursor=" + cursor("p=0001-01-01T00:00:00%2B14:00"),
        "cursor=" + cursor("o=-1"),
        "cursor=" + cursor("o=1" + "0" * 30),
        "cursor=" + cursor("p=" + "9" * 5000),
        "org=%00",
        "format=xml",
    ],
)
def test_hostile_list_parameters(api, seeded, query_string):
    response = api.get(url("records") + "?" + query_string)
    assert_contract(response)


@pytest.mark.parametrize("wait", ["nan", "inf", "1e400", "-1e-300", "0x10", "%00", "%ED%A0%80"])
def test_hostile_wait_parameters(api, wait):
    before = record_count()
    response = api.post(
        url("records") + f"?wait={wait}", {"items": [{"content": "x"}]}, format="json"
    )
    assert response.status_code == 400
    assert "wait" in assert_contract(response)["errors"]
    assert record_count() == before


@pytest.mark.parametrize(
    "record_id", ["%00", "%ED%A0%80", "x" * 5000, "{00000000-0000-0000-0000-000000000000}"]
)
@pytest.mark.parametrize("method", ["get", "patch", "put", "delete"])
def test_hostile_record_ids(api, seeded, record_id, method):
    before = record_count()
    response = getattr(api, method)(url(f"records/{record_id}"), {"content": "x"}, format="json")
    assert response.status_code == 404
    assert_contract(response)
    assert record_count() == before


# --- bounded bodies --------------------------------------------------------------------------


def test_a_body_over_the_default_limit_is_413_and_writes_nothing(api):
    """5 MiB against the default 4 MiB. (Django refuses ``request.body`` past 2.5 MB;
    that is a 413 too, never a 500.)"""
    body = json.dumps({"items": [{"content": "x" * 19_000} for _ in range(280)]})
    assert len(body) > 4 * 1024 * 1024
    response = send_raw(api, "records", body)
    assert response.status_code == 413
    assert assert_contract(response)["code"] == "request_too_large"
    assert record_count() == 0


def test_a_body_between_djangos_limit_and_ours_is_read(api):
    """3 MB: over Django's DATA_UPLOAD_MAX_MEMORY_SIZE, under MAX_BODY_BYTES."""
    items = [{"content": f"{n} " + "x" * 29_000} for n in range(100)]
    response = send(api, "records", {"items": items})
    assert response.status_code == 400  # content over 20,000 characters: a 400, not a crash
    assert set(assert_contract(response)["errors"]) == {f"items[{n}].content" for n in range(100)}
    items = [{"content": f"{n} " + "x" * 19_000} for n in range(100)]  # 1.9 MB
    assert send(api, "records", {"items": items}).status_code == 202
    assert record_count() == 100


@pytest.mark.parametrize(
    ("declared", "status"),
    [
        ("10", 400),  # smaller than the body: only 10 bytes are read, which is not JSON
        ("5000000", 413),  # over the limit: refused before anything is read
        ("-5", 400),  # nonsense: read as no body
        ("abc", 400),
        ("", 400),  # absent
    ],
)
def test_a_lying_content_length(api, settings, declared, status):
    settings.MEMORYHUB = {"MAX_BODY_BYTES": 4096}
    body = json.dumps({"items": [{"content": "x" * 3000}, {"content": "y" * 3000}]})
    response = api.generic(
        "POST", url("records"), body, content_type="application/json", CONTENT_LENGTH=declared
    )
    assert response.status_code == status, response.content
    assert_contract(response)
    assert record_count() == 0


def test_a_chunked_body_a_server_cannot_delimit_is_411(api):
    """Without ``wsgi.input_terminated`` (the development server, the test client) a body
    without a Content-Length cannot be read safely: 411, never silently an empty body."""
    response = api.generic(
        "POST",
        url("records"),
        json.dumps({"items": [{"content": "x"}]}),
        content_type="application/json",
        CONTENT_LENGTH="",
        HTTP_TRANSFER_ENCODING="chunked",
    )
    assert response.status_code == 411
    assert assert_contract(response)["code"] == "length_required"
    assert record_count() == 0


# --- on the wire, against gunicorn -------------------------------------------------------------


@pytest.fixture
def server(tmp_path, tenant) -> Iterator[tuple[str, int, str]]:
    """Real gunicorn on the test database (committed rows); MAX_BODY_BYTES 64 KiB."""
    _, key = create_api_key(org=tenant.org, can_read=True, can_write=True)
    process, base_url = start_gunicorn(
        tmp_path, memoryhub={"MAX_BODY_BYTES": 65_536, "THROTTLE_RATE": None}
    )
    try:
        host, port = base_url.removeprefix("http://").split(":")
        yield host, int(port), key
    finally:
        process.terminate()
        process.wait(timeout=20)


def exchange(server: tuple[str, int, str], head: str, body: bytes = b"") -> tuple[int, bytes]:
    """Send one raw HTTP/1.1 request (then half-close) and read the whole answer."""
    host, port, key = server
    request = (
        f"POST /api/v1/domains/support/records HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Api-Key {key}\r\nContent-Type: application/json\r\n"
        f"Connection: close\r\n{head}\r\n"
    ).encode() + body
    with socket.create_connection((host, port), timeout=30) as connection:
        try:
            connection.sendall(request)
            connection.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered (413) before reading all of it
        answer = b""
        while chunk := connection.recv(65_536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def chunked(payload: bytes, size: int = 8192) -> bytes:
    pieces = [payload[i : i + size] for i in range(0, len(payload), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def decode_chunked(raw: bytes) -> bytes:
    body = b""
    while raw:
        size_line, _, raw = raw.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        body, raw = body + raw[:size], raw[size + 2 :]
    return body


def json_of(raw: bytes) -> dict[str, Any]:
    try:
        return json.loads(raw)
    except ValueError:
        return json.loads(decode_chunked(raw))


@pytest.mark.django_db(transaction=True)
def test_on_the_wire_bodies_are_bounded_and_chunked_ones_are_read(server):
    big = json.dumps({"items": [{"content": "x" * 10_000} for _ in range(10)]}).encode()
    small = json.dumps({"items": [{"content": "sent in chunks"}]}).encode()

    status, body = exchange(server, "Transfer-Encoding: chunked\r\n", chunked(big))
    assert (status, json_of(body)["code"]) == (413, "request_too_large")

    status, body = exchange(server, f"Content-Length: {len(big)}\r\n", big)
    assert (status, json_of(body)["code"]) == (413, "request_too_large")

    status, body = exchange(server, "Content-Length: 10000000\r\n", small)
    assert (status, json_of(body)["code"]) == (413, "request_too_large")

    # The connection ends before the body it announced: what arrived is read, and a
    # batch cut short is not JSON, so nothing of it is written.
    cut = json.dumps({"items": [{"content": f"cut {n}"} for n in range(50)]}).encode()
    status, body = exchange(server, f"Content-Length: {len(cut)}\r\n", cut[: len(cut) // 2])
    assert (status, json_of(body)["code"]) == (400, "parse_error")
    assert record_count() == 0

    status, body = exchange(server, "Content-Length: 3\r\n", small)
    assert (status, json_of(body)["code"]) == (400, "parse_error")

    garbled = b'{"items": "\xff\xfe\xfd"}'
    status, body = exchange(server, f"Content-Length: {len(garbled)}\r\n", garbled)
    assert (status, json_of(body)["code"]) == (400, "parse_error")
    assert record_count() == 0

    status, body = exchange(server, "Transfer-Encoding: chunked\r\n", chunked(small, 7))
    assert status == 202, body
    assert json_of(body)["accepted"] == ["memory"]
    assert list(MemoryRecord.unscoped.values_list("content", flat=True)) == ["sent in chunks"]
