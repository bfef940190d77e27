"""The findings behind the policy core, one test each: read-only covers forget, a
write-only key never reads, every input edge is a 4xx, the admin never 500s on a
tampered inline, throttling holds under concurrency, and health tells the truth."""

from __future__ import annotations

import sys
import threading
from datetime import timedelta

import pytest
from celery import current_app
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from memoryhub import policy
from memoryhub.models import KnowledgeBase, MemoryRecord, Observation
from memoryhub.services import knowledge_bases, updates, write
from memoryhub.sources import DjangoMemoryStore
from tests.conftest import without_receipt
from tests.factories import MembershipFactory, create_api_key, key_client
from tests.sources.test_sources_seeds import run

pytestmark = pytest.mark.django_db


@pytest.fixture
def curated(tenant):
    """acme/support: a read-only handbook (one shared entry, one about Alice) and memory."""
    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    write.write(
        tenant.scope,
        [
            {"content": "Refunds take 5 days.", "key": "refunds"},
            {"content": "Alice is the VIP contact.", "namespace": "user:alice"},
        ],
        sources=["handbook"],
        principal=policy.SYSTEM,
    )
    write.write(
        tenant.scope,
        [
            {"content": "Shared note.", "key": "note"},
            {"content": "Alice likes tea.", "namespace": "user:alice"},
        ],
    )
    return tenant


def handbook_count() -> int:
    return MemoryRecord.unscoped.filter(knowledge_base__name="handbook").count()


@pytest.fixture
def agent(curated):
    return key_client(curated, can_read=True, can_write=True, can_forget=True)


def forget(client: APIClient, body: object):
    return client.post("/api/v1/domains/support/forget", body, format="json")


# --- read-only means read-only for agents ------------------------------------------------


def test_delete_by_id_of_a_read_only_record_is_refused_and_counted(agent):
    record = MemoryRecord.unscoped.get(key="refunds")
    response = agent.delete(f"/api/v1/domains/support/records/{record.pk}")
    assert response.status_code == 403
    assert response.json() | {"detail": ""} == {
        "code": "write_refused",
        "detail": "",
        "source": "handbook",
        "n": 1,
    }
    assert MemoryRecord.unscoped.filter(pk=record.pk).exists()
    assert KnowledgeBase.unscoped.get(name="handbook").refused_writes == 1
    refusal = Observation.unscoped.get(kind="memory.write_refused")
    assert refusal.payload["change"] == "forget"


@pytest.mark.parametrize(
    "body",
    [
        {"source": "handbook"},
        {"sources": ["memory", "handbook"]},
        {"key": "refunds"},
        {"all": True},
        {"namespace": "", "sources": ["handbook"]},
    ],
)
def test_forgets_that_touch_a_read_only_kb_are_refused_whole(agent, body):
    before = MemoryRecord.unscoped.count()
    response = forget(agent, body)
    assert response.status_code == 403, response.json()
    assert response.json()["code"] == "write_refused"
    assert response.json()["source"] == "handbook"
    assert MemoryRecord.unscoped.count() == before  # no partial forget


def test_forgetting_the_shared_namespace_needs_sources(agent):
    response = forget(agent, {"namespace": ""})
    assert response.status_code == 400
    assert "sources" in response.json()["errors"]
    assert "shared namespace" in response.json()["errors"]["sources"][0]
    assert MemoryRecord.unscoped.count() == 4
    response = forget(agent, {"namespace": "", "sources": ["memory"]})
    assert without_receipt(response.json()) == {
        "deleted": 1,
        "by_source": {"memory": 1},
        "refused": [],
    }
    assert handbook_count() == 2


def test_forget_all_of_the_writable_kbs_by_naming_them(agent):
    response = forget(agent, {"all": True, "sources": ["memory"]})
    assert response.json()["deleted"] == 2
    assert handbook_count() == 2


def test_a_data_subjects_erasure_reaches_read_only_kbs(agent):
    response = forget(agent, {"namespace": "user:alice"})
    assert response.status_code == 200
    assert response.json()["by_source"] == {"handbook": 1, "memory": 1}
    assert not MemoryRecord.unscoped.filter(namespace="user:alice").exists()
    assert MemoryRecord.unscoped.filter(key="refunds").exists()


def test_an_ignore_kb_keeps_its_records_and_is_reported(curated, agent):
    KnowledgeBase.unscoped.filter(name="handbook").update(on_write="ignore")
    response = forget(agent, {"all": True})
    assert response.status_code == 200
    assert without_receipt(response.json()) == {
        "deleted": 2,
        "by_source": {"memory": 2},
        "refused": ["handbook"],
    }
    assert handbook_count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_python_store_forgets_only_its_own_knowledge_base(curated):
    store = DjangoMemoryStore(curated.scope, source="memory")
    assert run(store.forget(scope="user:alice")) == 1
    assert MemoryRecord.unscoped.filter(namespace="user:alice", knowledge_base__name="handbook")


def test_operators_still_curate_read_only_kbs_in_the_admin(curated, admin_client):
    record = MemoryRecord.unscoped.get(key="refunds")
    response = admin_client.post(
        f"/admin/memoryhub/memoryrecord/{record.pk}/delete/", {"post": "yes"}
    )
    assert response.status_code == 302
    assert not MemoryRecord.unscoped.filter(pk=record.pk).exists()


# --- a key without read never receives content --------------------------------------------


def test_a_write_only_key_gets_ids_and_status_from_patch_and_put(curated):
    client = key_client(curated, can_read=False, can_write=True)
    record = MemoryRecord.unscoped.get(key="note")
    url = f"/api/v1/domains/support/records/{record.pk}"
    for response in (
        client.patch(url, {}, format="json"),
        client.patch(url, {"tags": ["x"]}, format="json"),
        client.put(url, {"content": "Shared note, rewritten.", "key": "note"}, format="json"),
    ):
        assert response.status_code == 200
        assert set(response.json()) == {"id", "status"}
        assert "Shared note" not in response.text
    assert client.get(url).status_code == 403


def test_an_empty_patch_changes_nothing(curated):
    client = key_client(curated, can_read=True, can_write=True)
    record = MemoryRecord.unscoped.get(key="note")
    written = Observation.unscoped.filter(kind="memory.written").count()
    response = client.patch(f"/api/v1/domains/support/records/{record.pk}", {}, format="json")
    assert response.status_code == 200
    assert response.json()["content"] == "Shared note."
    assert MemoryRecord.unscoped.get(pk=record.pk).updated_at == record.updated_at
    assert Observation.unscoped.filter(kind="memory.written").count() == written


# --- every input edge is a clear 4xx ---------------------------------------------------


def test_nul_bytes_in_path_query_and_header_are_json_4xx(curated, agent):
    response = agent.get("/api/v1/domains/sup%00port/records")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    response = agent.get("/api/v1/domains/support/records?org=%00")
    assert response.status_code == 400
    assert response.json()["errors"] == {"org": ["may not contain NUL characters."]}
    response = agent.get("/api/v1/domains/support/records?namespace=a%00b")
    assert response.status_code == 400
    staff = APIClient()
    staff.force_login(MembershipFactory(org=curated.org).user)
    response = staff.get("/api/v1/domains/support/records?org=acme%00")
    assert response.status_code == 400
    nul = APIClient()
    nul.credentials(HTTP_AUTHORIZATION="Api-Key abc\x00def.ghi")
    response = nul.get("/api/v1/domains/support/records")
    assert response.status_code == 401
    assert response.json()["code"] == "invalid_key"


@pytest.mark.parametrize(
    "moment",
    [
        "0001-01-01T00:00:00+14:00",
        "0001-01-01T00:00:00Z",
        "1999-12-31T23:59:59Z",
        "9000-01-01T00:00:01Z",
        "9999-12-31T23:59:59-14:00",
    ],
)
def test_expiry_outside_the_sane_range_is_a_400_naming_the_field(agent, moment):
    response = agent.post(
        "/api/v1/domains/support/records",
        {"items": [{"content": "x", "expires_at": moment}]},
        format="json",
    )
    assert response.status_code == 400
    assert "items[0].expires_at" in response.json()["errors"]
    record = MemoryRecord.unscoped.get(key="note")
    response = agent.patch(
        f"/api/v1/domains/support/records/{record.pk}", {"expires_at": moment}, format="json"
    )
    assert response.status_code == 400
    assert "expires_at" in response.json()["errors"]


def test_expiry_inside_the_range_in_any_zone_is_accepted(agent):
    response = agent.post(
        "/api/v1/domains/support/records",
        {"items": [{"content": "late", "expires_at": "8999-12-31T23:00:00+14:00"}]},
        format="json",
    )
    assert response.status_code == 202


def test_the_admin_record_form_refuses_a_year_one_expiry(curated, admin_client):
    handbook = KnowledgeBase.unscoped.get(name="handbook")
    response = admin_client.post(
        "/admin/memoryhub/memoryrecord/add/",
        {
            "knowledge_base": handbook.pk,
            "namespace": "",
            "kind": "semantic",
            "content": "year one",
            "tags": "",
            "metadata": "{}",
            "expires_at_0": "0001-01-01",
            "expires_at_1": "00:00:00",
        },
    )
    assert response.status_code == 200
    assert not MemoryRecord.unscoped.filter(content="year one").exists()
    assert admin_client.get("/admin/memoryhub/memoryrecord/?q=year").status_code == 200


def _kb_form(handbook: KnowledgeBase, rows: list[dict[str, str]], initial: int) -> dict:
    data = {
        "name": handbook.name,
        "description": "",
        "read_only": "on",
        "on_write": "refuse",
        "records-TOTAL_FORMS": str(len(rows)),
        "records-INITIAL_FORMS": str(initial),
    }
    for index, row in enumerate(rows):
        data.update({f"records-{index}-{name}": value for name, value in row.items()})
    return data


def test_record_rows_posted_to_a_kb_page_touch_no_record(curated, other_tenant, admin_client):
    """The page has no record inline (it would be every record): forged or stale rows of
    one are ignored, whoever's record they name."""
    handbook = KnowledgeBase.unscoped.get(name="handbook")
    write.write(other_tenant.scope, [{"content": "globex private"}])
    foreign = MemoryRecord.unscoped.get(content="globex private")
    same_domain = MemoryRecord.unscoped.get(key="note")  # memory KB, not the handbook
    rows = [
        {"id": str(victim.pk), "content": "rewritten", "DELETE": "on"}
        for victim in (foreign, same_domain)
    ] + [{"content": "never saved", "namespace": "", "kind": "semantic"}]
    response = admin_client.post(
        f"/admin/memoryhub/knowledgebase/{handbook.pk}/change/", _kb_form(handbook, rows, 2)
    )
    assert response.status_code == 302
    for victim in (foreign, same_domain):
        assert MemoryRecord.unscoped.get(pk=victim.pk).content == victim.content
    assert not MemoryRecord.unscoped.filter(content__in=["never saved", "rewritten"]).exists()
    assert handbook_count() == 2


def test_nul_in_an_admin_search_is_a_400(curated, admin_client):
    for url in (
        "/admin/memoryhub/memoryrecord/?q=%00",
        "/admin/memoryhub/memoryrecord/?namespace__exact=%00",
        "/admin/tenants/org/?q=a%00",
    ):
        assert admin_client.get(url).status_code == 400, url


def test_deleting_an_org_shows_counts_and_erases_first(curated, other_tenant, admin_client):
    write.write(other_tenant.scope, [{"content": "globex keeps this"}])
    page = admin_client.get(f"/admin/tenants/org/{curated.org.pk}/delete/")
    assert page.status_code == 200
    assert "4 memory records, erased first" in page.text
    assert "Refunds take 5 days." not in page.text  # counts, not rows
    response = admin_client.post(
        f"/admin/tenants/org/{curated.org.pk}/delete/", {"post": "yes"}, follow=True
    )
    assert response.status_code == 200
    assert "Erased 4 records." in response.text  # the receipt, kept after the org is gone
    assert 'id="deleted"' in response.text
    assert not MemoryRecord.unscoped.filter(org_id=curated.org.pk).exists()
    assert MemoryRecord.unscoped.filter(content="globex keeps this").exists()


def test_a_kb_delete_page_stays_small_with_many_records(curated, admin_client):
    write.write(
        curated.scope,
        [{"content": f"bulk fact {n}"} for n in range(100)],
        sources=["handbook"],
        principal=policy.SYSTEM,
    )
    handbook = KnowledgeBase.unscoped.get(name="handbook")
    page = admin_client.get(f"/admin/memoryhub/knowledgebase/{handbook.pk}/delete/")
    assert page.status_code == 200
    assert "102 memory records" in page.text
    assert "bulk fact 7" not in page.text


def test_an_import_needs_the_import_role(curated):
    viewer = Client()
    viewer.force_login(MembershipFactory(org=curated.org, role="viewer").user)
    handbook = KnowledgeBase.unscoped.get(name="handbook")
    response = viewer.post(
        f"/admin/memoryhub/knowledgebase/{handbook.pk}/import/",
        {"file": SimpleUploadedFile("a.jsonl", b'{"content": "sneaked in"}')},
    )
    assert response.status_code == 403
    assert not MemoryRecord.unscoped.filter(content="sneaked in").exists()


# --- throttling that holds ---------------------------------------------------------------


class Clock:
    """The time the limits read (``limits``' in-memory storage and the throttle), moved
    by the test: a window's edge is reached without waiting for it."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    import limits.storage.memory

    from memoryhub.api import throttling

    fake = Clock(3_600_000.0)
    monkeypatch.setattr(limits.storage.memory, "time", fake)
    monkeypatch.setattr(throttling, "time", fake)
    return fake


def test_the_moving_window_admits_exactly_the_limit_under_concurrency():
    from memoryhub.api.throttling import MovingWindow

    window = MovingWindow("test", limit=50, seconds=60)
    admitted: list[bool] = []
    lock = threading.Lock()
    start = threading.Barrier(50)

    def hammer() -> None:
        start.wait()
        for _ in range(4):
            result = window.hit("one-key")
            with lock:
                admitted.append(result)

    threads = [threading.Thread(target=hammer) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 200
    assert sum(admitted) == 50


def test_a_burst_across_a_window_edge_gets_no_more_than_the_limit(clock):
    """1,200 at the end of one minute and 835 early in the next were all admitted by the
    counter per window (2,035 in 55 s against 1200/min). A moving window admits none of
    the second burst until the first one's events are a minute old."""
    from memoryhub.api.throttling import MovingWindow

    window = MovingWindow("edge", limit=1200, seconds=60)
    clock.now = 3_600_059.0  # the last second of a minute
    assert sum(window.hit("k") for _ in range(1200)) == 1200
    clock.now = 3_600_061.0  # early in the next
    assert sum(window.hit("k") for _ in range(835)) == 0
    assert window.exceeded("k")
    assert 55 <= window.wait("k") <= 60
    clock.now = 3_600_119.5  # a minute after the first burst: room again, for as many
    assert sum(window.hit("k") for _ in range(1300)) == 1200


def test_over_any_span_of_the_window_the_limit_holds(clock):
    """Events spread at random over five windows, edges included: in every span of 60 s
    (each admitted event's own minute) at most the limit were admitted."""
    import random

    from memoryhub.api.throttling import MovingWindow

    window = MovingWindow("spans", limit=100, seconds=60)
    rng = random.Random(7)
    start = clock.now
    admitted: list[float] = []
    for moment in sorted(start + rng.uniform(0, 300) for _ in range(2_000)):
        clock.now = moment
        if window.hit("k"):
            admitted.append(moment)
    worst = max(
        sum(1 for other in admitted if moment <= other < moment + 60) for moment in admitted
    )
    assert worst <= 100
    assert len(admitted) >= 400  # and it is a limit, not a wall


def test_a_refused_event_is_not_counted(clock):
    from memoryhub.api.throttling import MovingWindow

    window = MovingWindow("refused", limit=3, seconds=10)
    assert [window.hit("k") for _ in range(5)] == [True, True, True, False, False]
    clock.now += 10.5
    assert [window.hit("k") for _ in range(4)] == [True, True, True, False]


def test_the_limits_live_in_the_shared_caches_redis(settings, tmp_path):
    """With a Redis cache, every process shares the limits: they are kept in its server
    (a private one here), under memoryhub's prefix."""
    from memoryhub.api.throttling import MovingWindow
    from tests.programs import start_private_redis

    server = start_private_redis(tmp_path)
    try:
        settings.CACHES = {
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": server.url(),
            }
        }
        window = MovingWindow("shared", limit=5, seconds=60)
        assert sum(window.hit("k") for _ in range(8)) == 5
        again = MovingWindow("shared", limit=5, seconds=60)  # another request, same store
        assert again.exceeded("k")
        keys = [key.decode() for key in server.client().keys("*")]
        assert keys and all(key.startswith("memoryhub:limits") for key in keys)
    finally:
        server.stop()


@pytest.mark.django_db(transaction=True)
def test_one_key_from_many_threads_gets_at_most_its_rate(settings, tenant):
    settings.MEMORYHUB = {"THROTTLE_RATE": "20/min"}
    _, key = create_api_key(org=tenant.org, name="hammer")
    # Switch threads as often as possible, so a read-modify-write race shows.
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    statuses: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def hammer() -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
        start.wait()
        for _ in range(10):
            response = client.get("/api/v1/whoami")
            with lock:
                statuses.append(response.status_code)
        connection.close()

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sys.setswitchinterval(switch_interval)
    assert statuses.count(200) == 20
    assert statuses.count(429) == 60


def test_throttled_answers_carry_retry_after(settings, tenant):
    settings.MEMORYHUB = {"THROTTLE_RATE": "2/min"}
    client = key_client(tenant, can_read=True)
    assert [client.get("/api/v1/whoami").status_code for _ in range(2)] == [200, 200]
    response = client.get("/api/v1/whoami")
    assert response.status_code == 429
    assert response.json()["code"] == "throttled"
    assert 1 <= int(response["Retry-After"]) <= 120  # up to two windows: the last one weighs


def test_failed_authentications_are_limited_per_address(settings, tenant):
    settings.MEMORYHUB = {"AUTH_FAILURE_RATE": "3/min"}
    guesser = APIClient(REMOTE_ADDR="203.0.113.7")
    for n in range(3):
        guesser.credentials(HTTP_AUTHORIZATION=f"Api-Key guess{n}.nope")
        assert guesser.get("/api/v1/whoami").status_code == 401
    response = guesser.get("/api/v1/whoami")
    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    # The address is refused before its key is looked up, even with a valid key...
    _, key = create_api_key(org=tenant.org)
    guesser.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    assert guesser.get("/api/v1/whoami").status_code == 429
    # ...while other addresses are not affected.
    other = APIClient(REMOTE_ADDR="198.51.100.1")
    other.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    assert other.get("/api/v1/whoami").status_code == 200


# --- health tells the truth ----------------------------------------------------------------


@pytest.fixture
def broker_mode():
    """Health as a site with a broker sees it (the in-memory transport answers)."""
    eager = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = False
    yield
    current_app.conf.task_always_eager = eager


def _backdate_pending(tenant, seconds: float) -> None:
    write.write(tenant.scope, [{"content": "waiting to be embedded"}])
    MemoryRecord.unscoped.filter(status="pending").update(
        updated_at=timezone.now() - timedelta(seconds=seconds)
    )


def test_health_is_degraded_when_no_worker_indexes_waiting_records(tenant, broker_mode):
    _backdate_pending(tenant, 600)
    response = APIClient().get("/api/v1/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded"
    indexing = body["indexing"]
    assert indexing["ok"] is False
    assert indexing["mode"] == "broker"
    assert indexing["pending"] == 1
    assert indexing["oldest_pending_seconds"] >= 600
    assert indexing["worker_seen_at"] is None


def test_health_is_ok_with_a_recent_heartbeat(tenant, broker_mode):
    from memoryhub.models import WorkerHeartbeat

    _backdate_pending(tenant, 600)
    WorkerHeartbeat.objects.create(hostname="w1@host", seen_at=timezone.now())
    body = APIClient().get("/api/v1/health").json()
    assert body["status"] == "ok"
    assert body["indexing"]["ok"] is True
    assert body["indexing"]["worker_seen_seconds_ago"] < 60
    WorkerHeartbeat.objects.update(seen_at=timezone.now() - timedelta(minutes=10))
    assert APIClient().get("/api/v1/health").json()["status"] == "degraded"


def test_health_is_degraded_when_the_oldest_pending_record_waits_too_long_despite_workers(
    tenant, other_tenant, broker_mode, settings
):
    from memoryhub.models import WorkerHeartbeat

    settings.MEMORYHUB = {"INDEXING_LAG_DEGRADED_AFTER": 900}
    WorkerHeartbeat.objects.create(hostname="w1@host", seen_at=timezone.now())
    _backdate_pending(tenant, 600)
    assert APIClient().get("/api/v1/health").json()["status"] == "ok"

    _backdate_pending(other_tenant, 1000)  # a backlog, or an embedder that keeps failing
    response = APIClient().get("/api/v1/health")
    assert response.status_code == 200  # queries still work: not taken out of service
    body = response.json()
    assert body["status"] == "degraded"
    assert body["indexing"]["lagging"] is True
    assert body["indexing"]["oldest_pending_seconds"] >= 1000


def test_health_is_ok_without_a_worker_when_nothing_waits(tenant, broker_mode):
    _backdate_pending(tenant, 5)  # just written: a worker may not have taken it yet
    body = APIClient().get("/api/v1/health").json()
    assert body["status"] == "ok"
    assert body["indexing"]["pending"] == 1


def test_health_in_eager_mode_reports_eager(tenant):
    body = APIClient().get("/api/v1/health").json()
    assert body["status"] == "ok"
    assert body["indexing"]["mode"] == "eager"
    assert body["broker"]["mode"] == "eager"


@pytest.mark.django_db(transaction=True)
def test_python_memory_acting_for_a_key_asks_the_policy(curated):
    from memoryhub import policy
    from memoryhub.exceptions import PolicyDenied
    from memoryhub.items import MemoryItem
    from memoryhub.sources import DjangoMemory

    write_only, _ = create_api_key(org=curated.org, can_read=False, can_write=True)
    memory = DjangoMemory(curated.scope, principal=policy.principal_for_key(write_only))
    with pytest.raises(PolicyDenied):
        run(memory.query("tea", k=3))
    run(memory.write([MemoryItem("Bob likes coffee.", "memory")]))
    assert MemoryRecord.unscoped.filter(content="Bob likes coffee.").exists()
    read_only, _ = create_api_key(org=curated.org, can_read=True)
    reader = DjangoMemory(curated.scope, principal=policy.principal_for_key(read_only))
    assert run(reader.query("Shared note", k=3))
    with pytest.raises(PolicyDenied):
        run(reader.write([MemoryItem("Nope.", "memory")]))


# --- further edges: subject namespaces, forgets, orgs, roles, the failure limit -----------


def test_only_subject_namespaces_reach_read_only_kbs(curated, agent, admin_client):
    write.write(
        curated.scope,
        [{"content": "Curated FAQ answer.", "namespace": "faq"}],
        sources=["handbook"],
        principal=policy.SYSTEM,
    )
    response = forget(agent, {"namespace": "faq"})
    assert response.status_code == 403
    assert MemoryRecord.unscoped.filter(namespace="faq").exists()
    # An operator erases any namespace in the admin.
    admin_client.post(
        "/admin/memoryhub/memoryrecord/erase-subject/",
        {"org": curated.org.pk, "namespace": "faq", "post": "yes"},
    )
    assert not MemoryRecord.unscoped.filter(namespace="faq").exists()


def test_subject_prefixes_are_a_setting(settings, curated, agent):
    settings.MEMORYHUB = {"SUBJECT_NAMESPACE_PREFIXES": None}
    write.write(
        curated.scope,
        [{"content": "FAQ.", "namespace": "faq"}],
        sources=["handbook"],
        principal=policy.SYSTEM,
    )
    assert forget(agent, {"namespace": "faq"}).status_code == 200
    from memoryhub.checks import check_settings

    settings.MEMORYHUB = {"SUBJECT_NAMESPACE_PREFIXES": "user:"}
    assert [m.id for m in check_settings()] == ["memoryhub.E006"]


def test_naming_a_read_only_kb_without_matches_is_not_a_refusal(agent):
    response = forget(agent, {"key": "note", "sources": ["memory", "handbook"]})
    assert without_receipt(response.json()) == {
        "deleted": 1,
        "by_source": {"memory": 1},
        "refused": [],
    }
    assert KnowledgeBase.unscoped.get(name="handbook").refused_writes == 0


def test_an_unknown_source_in_a_forget_is_a_400(agent):
    response = forget(agent, {"namespace": "user:alice", "sources": ["memroy"]})
    assert response.status_code == 400
    assert response.json()["code"] == "unknown_source"
    assert MemoryRecord.unscoped.filter(namespace="user:alice").count() == 2


def test_a_domain_never_moves_to_another_org(curated, other_tenant):
    owner = MembershipFactory(org=curated.org, role="owner").user
    MembershipFactory(org=other_tenant.org, role="owner", user=owner)
    client = Client()
    client.force_login(owner)
    client.post(
        f"/admin/tenants/domain/{curated.domain.pk}/change/",
        {"org": other_tenant.org.pk, "slug": "moved", "name": "Moved"},
    )
    curated.domain.refresh_from_db()
    assert curated.domain.org_id == curated.org.pk
    assert curated.domain.slug == "moved"  # the rest of the form did save


def test_an_owner_cannot_unsuspend_or_relink_their_org(curated):
    curated.org.is_active = False
    curated.org.save()
    owner = MembershipFactory(org=curated.org, role="owner").user
    client = Client()
    client.force_login(owner)
    client.post(
        f"/admin/tenants/org/{curated.org.pk}/change/",
        {
            "slug": curated.org.slug,
            "name": "Renamed",
            "external_ref": "someone-else",
            "is_active": "on",
            "domains-TOTAL_FORMS": "0",
            "domains-INITIAL_FORMS": "0",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    curated.org.refresh_from_db()
    assert (curated.org.name, curated.org.is_active, curated.org.external_ref) == (
        "Renamed",
        False,
        "",
    )


def test_a_member_with_two_roles_acts_by_the_role_of_each_org(curated, other_tenant):
    user = MembershipFactory(org=curated.org, role="operator").user
    MembershipFactory(org=other_tenant.org, role="viewer", user=user)
    write.write(other_tenant.scope, [{"content": "globex bob", "namespace": "user:bob"}])
    globex_kb = KnowledgeBase.unscoped.get(org=other_tenant.org)
    client = Client()
    client.force_login(user)
    assert "globex bob" in client.get("/admin/memoryhub/memoryrecord/").text
    client.post(
        "/admin/memoryhub/memoryrecord/add/",
        {"knowledge_base": globex_kb.pk, "namespace": "", "kind": "semantic", "content": "x"},
    )
    client.post(
        "/admin/memoryhub/memoryrecord/erase-subject/",
        {"org": other_tenant.org.pk, "namespace": "user:bob", "post": "yes"},
    )
    bob = MemoryRecord.unscoped.get(content="globex bob")
    client.post(f"/admin/memoryhub/memoryrecord/{bob.pk}/delete/", {"post": "yes"})
    client.post(
        "/admin/memoryhub/memoryrecord/",
        {"action": "delete_selected", "_selected_action": [str(bob.pk)], "post": "yes"},
    )
    assert MemoryRecord.unscoped.filter(org=other_tenant.org).count() == 1
    assert not MemoryRecord.unscoped.filter(content="x").exists()
    # ...and in their operator org, they act.
    client.post(
        "/admin/memoryhub/memoryrecord/erase-subject/",
        {"org": curated.org.pk, "namespace": "user:alice", "post": "yes"},
    )
    assert not MemoryRecord.unscoped.filter(org=curated.org, namespace="user:alice").exists()


def test_hostile_admin_queries_are_never_500(curated, admin_client):
    for url in (
        "/admin/memoryhub/memoryrecord/?namespace=%00&namespace=x",
        "/admin/memoryhub/memoryrecord/?content__contains=a&content__contains=%00",
    ):
        assert admin_client.get(url).status_code == 400, url
    response = admin_client.get(
        "/admin/autocomplete/",
        {
            "term": "\x00",
            "app_label": "memoryhub",
            "model_name": "memoryrecord",
            "field_name": "knowledge_base",
        },
    )
    assert response.status_code in (200, 403)
    assert admin_client.get("/admin/memoryhub/knowledgebase/%C2%B2/change/").status_code == 302


def test_a_spoofed_forwarded_for_neither_dodges_nor_aims_the_failure_limit(settings, tenant):
    settings.MEMORYHUB = {"AUTH_FAILURE_RATE": "3/min"}
    guesser = APIClient(REMOTE_ADDR="203.0.113.9")
    for n in range(3):
        guesser.credentials(HTTP_AUTHORIZATION=f"Api-Key guess{n}.nope")
        assert guesser.get("/api/v1/whoami", HTTP_X_FORWARDED_FOR=f"10.0.0.{n}").status_code == 401
    assert guesser.get("/api/v1/whoami", HTTP_X_FORWARDED_FOR="10.9.9.9").status_code == 429
    _, key = create_api_key(org=tenant.org)
    victim = APIClient(REMOTE_ADDR="198.51.100.2")
    victim.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    assert victim.get("/api/v1/whoami").status_code == 200


def test_an_expired_key_is_not_counted_as_a_guess(settings, tenant):
    settings.MEMORYHUB = {"AUTH_FAILURE_RATE": "2/min"}
    _, expired = create_api_key(org=tenant.org, expiry_date=timezone.now() - timedelta(days=1))
    client = APIClient(REMOTE_ADDR="192.0.2.4")
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {expired}")
    assert [client.get("/api/v1/whoami").status_code for _ in range(4)] == [401] * 4


def test_retry_after_is_when_the_next_request_fits(clock):
    from memoryhub.api.throttling import MovingWindow

    window = MovingWindow("retry", limit=10, seconds=60)
    start = clock.now
    for n in range(10):  # one every second: the oldest leaves the window first
        clock.now = start + n
        assert window.hit("k")
    asked = clock.now
    wait = window.wait("k")
    assert wait == 52  # the first second after the first event is a minute old
    clock.now = asked + wait - 1.5
    assert not window.hit("k")
    clock.now = asked + wait
    assert window.hit("k")


def test_the_policy_not_the_door_decides_who_a_read_only_knowledge_base_binds(tenant, other_tenant):
    from memoryhub.exceptions import WriteRefused
    from memoryhub.services import forget

    knowledge_bases.ensure_knowledge_base(tenant.scope, "handbook", read_only=True)
    item = [{"content": "Curated answer."}]
    outsider = MembershipFactory(org=other_tenant.org, role="operator", user__is_staff=True)
    viewer = MembershipFactory(org=tenant.org, role="viewer", user__is_staff=True)
    curator = MembershipFactory(org=tenant.org, role="operator")
    key, _ = create_api_key(org=tenant.org, can_read=True, can_write=True, can_forget=True)
    bound = [
        policy.principal_for_user(outsider.user, door="admin"),  # staff, operator elsewhere
        policy.principal_for_user(viewer.user, door="admin"),  # staff, viewer here
        policy.principal_for_key(key),  # a key never curates
        policy.AGENT,
    ]
    for principal in bound:
        with pytest.raises(WriteRefused):
            write.write(tenant.scope, item, sources=["handbook"], principal=principal)
    admin = policy.principal_for_user(curator.user, door="admin")
    written = write.write(tenant.scope, item, sources=["handbook"], principal=admin)
    assert written.accepted == ["handbook"]
    record_id = written.records[0].id
    for principal in bound:
        with pytest.raises(WriteRefused):
            updates.update_record(
                tenant.scope, record_id, {"content": "Changed."}, partial=True, principal=principal
            )
        with pytest.raises(WriteRefused):
            forget.forget_record(tenant.scope, record_id, principal=principal)
    refused = Observation.unscoped.filter(kind="memory.write_refused", org=tenant.org)
    assert sorted(set(refused.values_list("actor", flat=True))) == sorted(
        {
            "",
            f"admin:{outsider.user.username}",
            f"admin:{viewer.user.username}",
            f"api-key:{key.prefix}",
        }
    )
    # The curator is named as the door names it, and the observation says it curated.
    observed = Observation.unscoped.get(kind="memory.written", org=tenant.org)
    assert observed.actor == f"admin:{curator.user.username}"
    assert observed.payload["operator"] is True
    assert forget.forget_record(tenant.scope, record_id, principal=admin).deleted == 1


def test_the_actor_is_named_from_the_principal_in_one_place(tenant, acme_user):
    from django.contrib.auth.models import AnonymousUser

    key, _ = create_api_key(org=tenant.org, can_read=True)
    name = acme_user.get_username()
    labels = {
        policy.actor_label(policy.principal_for_key(key)): f"api-key:{key.prefix}",
        policy.actor_label(policy.principal_for_key(key, door="mcp")): f"mcp:{key.prefix}",
        policy.actor_label(policy.principal_for_user(acme_user)): f"user:{name}",
        policy.actor_label(policy.principal_for_user(acme_user, door="admin")): f"admin:{name}",
        policy.actor_label(policy.principal_for_user(AnonymousUser())): "",
        policy.actor_label(policy.SYSTEM): "system",
        policy.actor_label(policy.AGENT): "",
    }
    assert list(labels) == list(labels.values())
    # A task carries the label and acts for it as operator code.
    worker = policy.principal_for_task(f"admin:{name}")
    assert policy.actor_label(worker) == f"admin:{name}"
    assert policy.may_bypass_read_only(worker, tenant.org.pk)
