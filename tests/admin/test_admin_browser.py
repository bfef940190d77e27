"""A real browser (Debian's headless Chromium, driven by Selenium) through the admin.

Logs in, creates a read-only knowledge base, imports a Markdown file, finds the
imported text in the retrieval playground, and erases the namespace; a screenshot of
each step is saved under ``test-artifacts/admin/``, and with
``MEMORYHUB_UPDATE_SCREENSHOTS=1`` into ``docs/screenshots/`` too (the README's). The
lists are measured at 1280 and 1920 px: none scrolls sideways.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from memoryhub import policy
from memoryhub.models import ErasureReceipt, KnowledgeBase, MemoryRecord
from memoryhub.services import knowledge_bases, updates
from tenants.models import Membership
from tests.factories import DomainFactory, OrgFactory

pytestmark = pytest.mark.django_db(transaction=True)

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "admin"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
RUNBOOK = """# Incident runbook

## Paging

Page the on-call engineer through the pager rotation; if nobody acknowledges within
ten minutes, escalate to the engineering manager.

## Rollbacks

Rollbacks need two approvers and a ticket. Roll back first, investigate second.
"""


def _browser_or_skip():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        message = f"missing {', '.join(missing)} (Debian packages chromium, chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; .ci/run must install them")
        pytest.skip(message)
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1000",
    ):
        options.add_argument(flag)
    # The console, where Chromium reports what the Content-Security-Policy refused.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def csp_refusals(browser) -> list[str]:
    """What the page's Content-Security-Policy refused since the last call (the console)."""
    return [
        entry["message"]
        for entry in browser.get_log("browser")
        if "Content Security Policy" in entry["message"]
    ]


@pytest.fixture
def browser():
    driver = _browser_or_skip()
    driver.implicitly_wait(5)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


#: The README's screenshots: ``MEMORYHUB_UPDATE_SCREENSHOTS=1`` saves each shot there too.
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def shot(browser, name: str) -> None:
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    if os.environ.get("MEMORYHUB_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(ARTIFACTS / f"{name}.png", SCREENSHOTS / f"{name}.png")


def viewport(browser, width: int, height: int = 1000) -> None:
    """Make the page ``width`` CSS pixels wide (the window's frame aside)."""
    browser.set_window_size(width, height)
    inner = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(width + (width - inner[0]), height + (height - inner[1]))
    assert browser.execute_script("return window.innerWidth") == width


def fits(browser) -> tuple[int, int]:
    """The page's width and the window's: no horizontal scrolling when the first is not
    larger."""
    return tuple(
        browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    )


def login(browser, live_server) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{live_server.url}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys("operator")
    browser.find_element(By.NAME, "password").send_keys("s3cret-pass")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 30).until(ec.title_contains("Site administration"))


def test_operator_curates_imports_queries_and_erases(
    browser, live_server, django_user_model, tmp_path
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def wait(condition):
        """Wait for the next page (a click returns before its request completes)."""
        return WebDriverWait(browser, 30).until(condition)

    domain = DomainFactory(org=OrgFactory(slug="acme", name="Acme"), slug="support")
    django_user_model.objects.create_superuser("operator", "op@example.com", "s3cret-pass")

    browser.get(f"{live_server.url}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys("operator")
    browser.find_element(By.NAME, "password").send_keys("s3cret-pass")
    shot(browser, "01-login")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait(ec.title_contains("Site administration"))
    assert "memoryhub" in browser.title
    for label in ("Knowledge bases", "Memory records", "Observations", "API keys"):
        assert browser.find_element(By.LINK_TEXT, label)
    shot(browser, "02-index")

    browser.get(f"{live_server.url}/admin/memoryhub/knowledgebase/add/")
    Select(browser.find_element(By.NAME, "domain")).select_by_visible_text("acme/support")
    browser.find_element(By.NAME, "name").send_keys("runbook")
    browser.find_element(By.NAME, "description").send_keys("Curated incident runbook")
    browser.find_element(By.NAME, "read_only").click()
    shot(browser, "03-create-read-only-kb")
    browser.find_element(By.NAME, "_continue").click()
    wait(ec.url_contains("/change/"))
    knowledge_base = KnowledgeBase.unscoped.get(name="runbook")
    assert knowledge_base.read_only

    markdown = tmp_path / "runbook.md"
    markdown.write_text(RUNBOOK)
    browser.find_element(By.LINK_TEXT, "Import a file").click()
    browser.find_element(By.NAME, "file").send_keys(str(markdown))
    browser.find_element(By.NAME, "namespace").send_keys("team:oncall")
    shot(browser, "04-import-markdown")
    browser.find_element(By.CSS_SELECTOR, "#import-form input[type=submit]").click()
    message = wait(ec.presence_of_element_located((By.CSS_SELECTOR, "ul.messagelist li")))
    assert "runbook.md is queued for import" in message.text
    # Said where the page scrolled to (the import's row), not above it, out of view.
    wait(
        lambda driver: driver.execute_script(
            "var r = document.querySelector('ul.messagelist').getBoundingClientRect();"
            "return r.top >= 0 && r.bottom <= window.innerHeight"
        )
    )
    # No broker here: the job ran when the upload committed (eager mode).
    status = browser.find_element(By.CSS_SELECTOR, "tr.import-job .import-status")
    assert status.text == "Done"
    shot(browser, "05-imported")
    records = MemoryRecord.unscoped.filter(knowledge_base=knowledge_base)
    assert records.count() == 2
    assert set(records.values_list("status", flat=True)) == {"indexed"}
    assert {r.metadata["heading"] for r in records} == {"Paging", "Rollbacks"}

    browser.get(f"{live_server.url}/admin/memoryhub/memoryrecord/playground/")
    Select(browser.find_element(By.NAME, "domain")).select_by_visible_text("acme/support")
    browser.find_element(By.NAME, "query").send_keys("who approves a rollback")
    Select(browser.find_element(By.NAME, "namespaces")).select_by_visible_text("team:oncall")
    Select(browser.find_element(By.NAME, "sources")).select_by_visible_text("runbook")
    # The filters most queries leave alone are folded: the form is short.
    assert not browser.find_element(By.ID, "playground-more").get_attribute("open")
    form = browser.find_element(By.ID, "playground-form").size["height"]
    shot(browser, "06-playground-form")
    assert form <= 760, form
    browser.find_element(By.CSS_SELECTOR, "#playground-form input[type=submit]").click()
    grounding = wait(ec.presence_of_element_located((By.ID, "playground-grounding"))).text
    assert "[runbook] Rollbacks" in grounding
    results = browser.find_element(By.ID, "playground-results")
    assert "two approvers" in results.text
    # The answer opens at the results, not below a screen of form (1280 × 1000).
    top, first_row_bottom, height = browser.execute_script(
        "return [arguments[0].getBoundingClientRect().top,"
        " arguments[0].querySelector('tr.playground-item').getBoundingClientRect().bottom,"
        " window.innerHeight]",
        results,
    )
    assert top >= 0 and first_row_bottom <= height, (top, first_row_bottom, height)
    shot(browser, "06-playground")

    browser.get(f"{live_server.url}/admin/memoryhub/memoryrecord/erase-subject/")
    Select(browser.find_element(By.NAME, "org")).select_by_visible_text("Acme")
    browser.find_element(By.NAME, "namespace").send_keys("team:oncall")
    browser.find_element(By.CSS_SELECTOR, "#erase-subject-form input[type=submit]").click()
    preview = wait(ec.presence_of_element_located((By.ID, "erasure-preview"))).text
    assert "runbook" in preview
    assert MemoryRecord.unscoped.filter(namespace="team:oncall").count() == 2  # nothing yet
    shot(browser, "07-erase-confirm")
    # "No, take me back" sits level with "Yes, erase": its words centred in it as the
    # button's are (they sat at its top edge).
    offset = browser.execute_script(
        "var a = document.querySelector('.submit-row .cancel-link');"
        "var box = a.getBoundingClientRect(); var r = document.createRange();"
        "r.selectNodeContents(a); var text = r.getBoundingClientRect();"
        "return (text.top + text.bottom) / 2 - (box.top + box.bottom) / 2"
    )
    assert abs(offset) <= 2, offset
    browser.find_element(By.CSS_SELECTOR, "input[value='Yes, erase']").click()
    receipt = wait(ec.presence_of_element_located((By.ID, "erasure-receipt")))
    assert "Erased 2 records." in receipt.text
    [made] = ErasureReceipt.unscoped.filter(org_slug="acme").order_by("-created_at")[:1]
    assert str(made.pk) in browser.find_element(By.ID, "receipt-ids").text
    shot(browser, "08-erasure-receipt")
    assert MemoryRecord.unscoped.filter(namespace="team:oncall").count() == 0

    browser.get(f"{live_server.url}/admin/memoryhub/observation/")
    assert wait(ec.presence_of_element_located((By.ID, "observation-chart")))
    shot(browser, "09-observations")
    assert domain.pk


def test_operator_home_a_large_kb_a_live_import_and_its_undo(
    browser, live_server, django_user_model, tmp_path
):
    """With a real broker and worker: the import runs beside the page, whose progress
    moves without a reload; the undo erases what it created and links its receipt."""
    import json

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from memoryhub.models import ImportJob, content_hash
    from memoryhub.scope import Scope
    from tests.programs import celery_broker, redis_server, start_worker

    def wait(condition, timeout: float = 60):
        return WebDriverWait(browser, timeout).until(condition)

    domain = DomainFactory(org=OrgFactory(slug="acme", name="Acme"), slug="support")
    scope = Scope.for_domain(domain)
    handbook = knowledge_bases.ensure_knowledge_base(scope, "handbook", read_only=True)
    MemoryRecord.unscoped.bulk_create(
        (
            MemoryRecord(
                org_id=domain.org_id,
                domain_id=domain.pk,
                knowledge_base=handbook,
                namespace=f"user:{i % 40}",
                content=f"Handbook passage {i}",
                content_hash=content_hash(f"Handbook passage {i}"),
                status=MemoryRecord.Status.INDEXED,
            )
            for i in range(50_000)
        ),
        batch_size=10_000,
    )
    imports_kb = knowledge_bases.ensure_knowledge_base(scope, "imports")
    django_user_model.objects.create_superuser("operator", "op@example.com", "s3cret-pass")
    login(browser, live_server)

    browser.get(f"{live_server.url}/admin/memoryhub/knowledgebase/{handbook.pk}/change/")
    contents = wait(ec.presence_of_element_located((By.ID, "kb-contents")))
    assert "50000" in contents.text
    assert len(browser.find_elements(By.CSS_SELECTOR, "input, select, textarea")) < 30
    shot(browser, "11-kb-with-50k-records")

    # 4,000 lines, the last 39 repeating earlier ones: 3,961 records.
    facts = [f"imported fact {i}" for i in range(3961)] + [f"imported fact {i}" for i in range(39)]
    lines = tmp_path / "facts.jsonl"
    lines.write_text("\n".join(json.dumps({"content": fact}) for fact in facts))
    with redis_server(tmp_path) as redis, celery_broker(redis.url()):
        worker = start_worker(redis.url(), tmp_path / "worker.log")
        try:

            def worker_seen(_):
                browser.get(f"{live_server.url}/admin/")
                return "Worker running" in browser.find_element(By.ID, "mh-pipeline").text

            wait(worker_seen)
            home = browser.find_element(By.ID, "memoryhub-home")
            assert "acme / support" in home.text and "50000" in home.text
            shot(browser, "10-operator-home")
            viewport(browser, 1920)
            shot(browser, "10-operator-home-1920")
            viewport(browser, 1280)
            # The home's Import button: choose the knowledge base and the file.
            browser.find_element(By.ID, "mh-import").click()
            Select(
                wait(ec.presence_of_element_located((By.NAME, "knowledge_base")))
            ).select_by_visible_text("acme / support / imports")
            browser.find_element(By.NAME, "file").send_keys(str(lines))
            browser.find_element(By.CSS_SELECTOR, "#import-form input[type=submit]").click()
            row = wait(ec.presence_of_element_located((By.CSS_SELECTOR, "tr.import-job")))
            assert f"/knowledgebase/{imports_kb.pk}/change/" in browser.current_url
            browser.execute_script("window.scrollTo(0, 0)")  # the contents and the import
            shot(browser, "12-import-progress")
            # The page polls: the status turns Done without a reload.
            wait(
                lambda _: (
                    row.find_element(By.CLASS_NAME, "import-status").text == "Done"
                    and row.find_element(By.CLASS_NAME, "index-count").text == "3961/3961"
                ),
                timeout=120,
            )
            assert row.find_element(By.CLASS_NAME, "import-count").text == "4000/4000"
            # The contents follow the import, and the row says where the 39 lines went.
            assert browser.find_element(By.CSS_SELECTOR, "#kb-records a").text == "3961"
            assert browser.find_element(By.CSS_SELECTOR, "#kb-pending a").text == "0"
            wait(
                lambda _: (
                    "39 were duplicates" in row.find_element(By.CLASS_NAME, "import-summary").text
                )
            )
            browser.execute_script("window.scrollTo(0, 0)")
            shot(browser, "13-import-done")
            row.find_element(By.CSS_SELECTOR, "button.import-undo").click()
            browser.switch_to.alert.accept()
            receipt = wait(
                ec.presence_of_element_located((By.CSS_SELECTOR, ".import-receipt a")),
                timeout=120,
            )
            job = ImportJob.unscoped.get()
            assert job.status == ImportJob.Status.UNDONE
            assert not MemoryRecord.unscoped.filter(knowledge_base=imports_kb).exists()
            row = browser.find_element(By.CSS_SELECTOR, "tr.import-job")  # after the reload
            assert not [
                b for b in row.find_elements(By.TAG_NAME, "button") if b.is_displayed()
            ]  # undone: nothing left to cancel, re-run or undo
            kb = KnowledgeBase.unscoped.get(pk=imports_kb.pk)
            assert kb.description == ""  # the KB's own form was not what got submitted
            shot(browser, "14-import-undone")
            receipt.click()
            wait(ec.url_contains("/erasurereceipt/"))
            assert "3961" in browser.find_element(By.ID, "content").text
            shot(browser, "15-undo-receipt")
        finally:
            worker.stop()


def test_operator_reads_a_records_history_restores_it_and_follows_provenance(
    browser, live_server, django_user_model
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from memoryhub.models import MemoryRecord
    from memoryhub.scope import Scope
    from memoryhub.services import write

    domain = DomainFactory(org=OrgFactory(slug="acme", name="Acme"), slug="support")
    scope = Scope.for_domain(domain)
    turns = ["My favourite colour is blue.", "My home city is Berlin."]
    write.write(
        scope,
        [{"content": t, "kind": "episodic", "namespace": "user:alice"} for t in turns],
        consolidate=True,
    )
    fact = MemoryRecord.unscoped.get(key="home city")
    updates.update_record(
        scope,
        fact.pk,
        {"content": "home city: Munich"},
        partial=True,
        principal=policy.AgentPrincipal(label="api-key:demo"),
    )
    django_user_model.objects.create_superuser("operator", "op@example.com", "s3cret-pass")
    browser.get(f"{live_server.url}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys("operator")
    browser.find_element(By.NAME, "password").send_keys("s3cret-pass")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 30).until(ec.title_contains("Site administration"))

    browser.get(f"{live_server.url}/admin/memoryhub/memoryrecord/{fact.pk}/change/")
    history = browser.find_element(By.ID, "mh-history")
    browser.execute_script("arguments[0].scrollIntoView()", history)
    assert [
        row.get_attribute("data-version")
        for row in history.find_elements(By.CSS_SELECTOR, "tr.mh-version")
    ] == ["2", "1"]
    assert history.find_element(By.TAG_NAME, "del").text == "Berlin"
    assert history.find_element(By.TAG_NAME, "ins").text == "Munich"
    provenance = browser.find_element(By.ID, "mh-provenance")
    assert "My home city is Berlin." in provenance.text
    shot(browser, "16-record-history-and-sources")
    history.find_element(By.CSS_SELECTOR, "button[formaction$='/restore/1/']").click()
    WebDriverWait(browser, 30).until(ec.presence_of_element_located((By.CSS_SELECTOR, ".success")))
    assert "Version 1 restored" in browser.find_element(By.CSS_SELECTOR, ".success").text
    fact.refresh_from_db()
    assert (fact.content, fact.version, fact.change_cause) == ("home city: Berlin", 3, "restore")
    shot(browser, "17-restored")
    # From the source turn to what was learned from it.
    link = browser.find_element(By.CSS_SELECTOR, "#mh-provenance a")
    link.click()
    WebDriverWait(browser, 30).until(ec.presence_of_element_located((By.CSS_SELECTOR, ".mh-facts")))
    assert "home city: Berlin" in browser.find_element(By.CSS_SELECTOR, ".mh-facts").text


def test_lists_fit_the_page_and_give_the_content_room(browser, live_server, django_user_model):
    """At 1280 and 1920 px: the records, knowledge bases and API keys lists never scroll
    sideways, and a record's content has a wide column (not a 10-line sliver)."""
    from memoryhub.scope import Scope
    from memoryhub.services import write
    from tests.factories import create_api_key

    domain = DomainFactory(org=OrgFactory(slug="acme", name="Acme"), slug="customer-support")
    scope = Scope.for_domain(domain)
    knowledge_bases.ensure_knowledge_base(scope, "customer-support-handbook")
    write.write(
        scope,
        [
            {
                "content": f"Refunds for orders placed online are issued to the original "
                f"payment method within {n} business days of the return being received "
                "at the warehouse, unless the customer asked for store credit instead.",
                "key": f"refund-policy-{n}",
                "namespace": "team:customer-support-escalations",
                "tags": ["billing", "policy", "refunds"],
            }
            for n in range(12)
        ],
        sources=["customer-support-handbook"],
    )
    knowledge_bases.ensure_knowledge_base(
        scope, "incident-runbooks-and-postmortems", read_only=True
    )
    for n in range(3):
        create_api_key(org=domain.org, domain=domain, name=f"support-bot-production-{n}")
    from memoryhub.services.forget import ForgetRequest, forget

    write.write(scope, [{"content": "to erase", "namespace": "user:alice"}])
    forget(
        scope,
        ForgetRequest(namespace="user:alice"),
        principal=policy.SystemPrincipal(label="admin:operator"),
    )
    # The longest dates the admin's format writes, and an API key's actor label.
    from datetime import UTC, datetime

    from memoryhub.models import MemoryRecord, Observation

    MemoryRecord.unscoped.update(updated_at=datetime(2026, 9, 30, 12, 59, tzinfo=UTC))
    Observation.unscoped.create(
        org_id=domain.org.pk,
        domain_id=domain.pk,
        kind=Observation.Kind.MEMORY_WRITTEN,
        source="customer-support-handbook",
        count=12,
        actor="api-key:h2HHk3Lm",
    )
    django_user_model.objects.create_superuser("operator", "op@example.com", "s3cret-pass")
    login(browser, live_server)
    for width in (1280, 1920):
        viewport(browser, width)
        for path in (
            "/admin/memoryhub/memoryrecord/",
            "/admin/memoryhub/knowledgebase/",
            "/admin/tenants/apikey/",
            "/admin/memoryhub/observation/",
            "/admin/memoryhub/erasurereceipt/",
        ):
            browser.get(live_server.url + path)
            name = {
                "observation": "21-observations",
                "memoryrecord": "18-records",
                "knowledgebase": "19-knowledge-bases",
                "apikey": "20-api-keys",
            }.get(path.strip("/").split("/")[-1], "")
            if name and (width == 1280 or name == "18-records"):
                shot(browser, name + ("" if width == 1280 else f"-{width}"))
            page, window = fits(browser)
            assert page <= window, f"{path} at {width} px is {page} px wide"
            overflow = browser.execute_script(
                "var r = document.querySelector('#changelist .results');"
                "return r ? [r.scrollWidth, r.clientWidth] : [0, 0]"
            )
            assert overflow[0] <= overflow[1], f"{path}'s table scrolls at {width} px"
            if "memoryrecord" in path:
                content = browser.execute_script(
                    "return document.querySelector('#result_list .field-short_content')"
                    ".getBoundingClientRect().width"
                )
                assert content >= 300 if width == 1280 else content >= 600, (path, content)
                # A record's date takes two lines at most (its date, its time), not three.
                lines = browser.execute_script(
                    "var el = document.querySelector('#result_list .mh-when');"
                    "var r = document.createRange(); r.selectNodeContents(el);"
                    "var tops = new Set(); for (const x of r.getClientRects())"
                    " tops.add(Math.round(x.top)); return tops.size"
                )
                assert lines <= 2, (width, lines)
            if "observation" in path:
                # Who acted is shown whole (an API key's prefix was cut: api-key:h2HH…).
                cut = browser.execute_script(
                    "return [...document.querySelectorAll('#result_list td.field-actor')]"
                    ".filter(td => td.scrollWidth > td.clientWidth).length"
                )
                assert cut == 0, (width, cut)
        browser.get(live_server.url + "/admin/")
        assert fits(browser)[0] <= width


def test_the_admin_and_swagger_ui_work_under_the_content_security_policy(
    browser, live_server, django_user_model, client, transactional_db
):
    """Every answer carries the policy; the admin's pages (the knowledge base page's
    polling and confirmations are a script file) and Swagger UI (its start-up script a
    file too) run under it with nothing refused."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    for url in ("/api/v1/health", "/admin/login/", "/api/docs/"):
        header = client.get(url)["Content-Security-Policy"]
        assert "script-src 'self'" in header and "frame-ancestors 'none'" in header
    from memoryhub.scope import Scope

    domain = DomainFactory(org=OrgFactory(slug="acme", name="Acme"), slug="support")
    operator = django_user_model.objects.create_user(
        "operator", password="s3cret-pass", is_staff=True
    )
    Membership.objects.create(user=operator, org=domain.org, role="operator")
    handbook = knowledge_bases.ensure_knowledge_base(Scope.for_domain(domain), "handbook")
    from memoryhub.services import imports

    imports.create_job(  # the page then lists it, with its polling and undo confirmation
        Scope.for_domain(domain),
        handbook,
        text='{"content": "imported under the policy"}',
        format="jsonl",
        filename="a.jsonl",
        principal=policy.AgentPrincipal(label="admin:operator"),
    )
    login(browser, live_server)
    browser.get(f"{live_server.url}/admin/memoryhub/knowledgebase/{handbook.pk}/change/")
    WebDriverWait(browser, 30).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, "tr.import-job"))
    )
    WebDriverWait(browser, 30).until(  # polled by the script file: the import is done
        lambda driver: "Done" in driver.find_element(By.CSS_SELECTOR, ".import-status").text
    )
    browser.get(f"{live_server.url}/api/docs/")
    WebDriverWait(browser, 30).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, "#swagger-ui .opblock"))
    )
    assert len(browser.find_elements(By.CSS_SELECTOR, "#swagger-ui .opblock")) > 5
    assert csp_refusals(browser) == []


def test_every_admin_page_fits_1280_and_1920_px(browser, live_server, django_user_model):
    """Every page an operator can open (each model's list, add and change pages, the
    history pages, and memoryhub's own: the playground, erase, import, receipts) opens
    without an error and never scrolls sideways at 1280 or 1920 px; nothing in it runs
    past the right edge. A shot of each is kept under test-artifacts/admin/pages/."""
    from django.contrib import admin
    from django.urls import reverse

    from memoryhub.models import ImportJob, Observation
    from memoryhub.scope import Scope
    from memoryhub.services import write
    from memoryhub.services.forget import ForgetRequest, forget
    from memoryhub.services.imports import jobs
    from tests.factories import create_api_key

    org = OrgFactory(slug="acme", name="Acme")
    domain = DomainFactory(org=org, slug="customer-support")
    scope = Scope.for_domain(domain)
    handbook = knowledge_bases.ensure_knowledge_base(scope, "customer-support-handbook")
    write.write(
        scope,
        [
            {
                "content": f"Refunds for orders placed online are issued within {n} business"
                " days of the return being received at the warehouse.",
                "key": f"refund-policy-{n}",
                "namespace": "team:customer-support-escalations",
                "tags": ["billing", "refunds"],
                "metadata": {"owner": "billing-team", "reviewed": True},
            }
            for n in range(5)
        ],
        sources=["customer-support-handbook"],
    )
    record = MemoryRecord.unscoped.get(key="refund-policy-0")
    updates.update_record(
        scope, record.pk, {"content": "Refunds take ten business days."}, partial=True
    )
    knowledge_bases.ensure_knowledge_base(scope, "incident-runbooks", read_only=True)
    job = jobs.create_job(scope, handbook, format="markdown", filename="runbook.md", text=RUNBOOK)
    write.write(scope, [{"content": "to erase", "namespace": "user:alice"}])
    forget(
        scope,
        ForgetRequest(namespace="user:alice"),
        principal=policy.SystemPrincipal(label="admin:operator"),
    )
    receipt = ErasureReceipt.unscoped.get()
    from memoryhub.services.archives import jobs as archive_jobs

    archive_jobs.run_job(str(archive_jobs.start_export(org, principal=policy.SYSTEM).pk))
    create_api_key(org=org, domain=domain, name="support-bot-production")
    operator = django_user_model.objects.create_superuser(
        "operator", "op@example.com", "s3cret-pass"
    )
    Membership.objects.create(user=operator, org=org, role=Membership.Role.OWNER)
    Observation.unscoped.create(
        org_id=org.pk,
        domain_id=domain.pk,
        kind=Observation.Kind.MEMORY_WRITTEN,
        source="customer-support-handbook",
        count=5,
        actor="api-key:h2HHk3Lm",
    )

    pages = ["/admin/", "/admin/memoryhub/", "/admin/tenants/"]
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label not in ("memoryhub", "tenants"):
            continue
        name = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        pages.append(reverse(f"{name}_changelist"))
        if model_admin.has_add_permission(_request_of(operator)):
            pages.append(reverse(f"{name}_add"))
        first = (
            model._default_manager.model.unscoped.first()
            if hasattr(model, "unscoped")
            else model._default_manager.first()
        )
        if first is not None:
            pages.append(reverse(f"{name}_change", args=[first.pk]))
            pages.append(reverse(f"{name}_history", args=[first.pk]))
    kb_pages = "/admin/memoryhub/knowledgebase"
    pages += [
        "/admin/memoryhub/memoryrecord/playground/",
        f"/admin/memoryhub/memoryrecord/playground/?domain={domain.pk}&query=refund",
        "/admin/memoryhub/memoryrecord/erase-subject/",
        f"{kb_pages}/import/",
        f"{kb_pages}/{handbook.pk}/import/",
        "/admin/memoryhub/erasurereceipt/lookup/",
        f"/admin/memoryhub/erasurereceipt/batch/{receipt.batch}/",
        f"/admin/memoryhub/memoryrecord/{record.pk}/change/#mh-history",
        "/admin/memoryhub/memoryrecord/export-subject/",
        "/admin/memoryhub/archivejob/export/",
        "/admin/memoryhub/archivejob/import/",
    ]
    assert ImportJob.unscoped.get(pk=job.pk).status == "done"

    login(browser, live_server)
    pages_dir = ARTIFACTS / "pages"
    pages_dir.mkdir(exist_ok=True)
    problems = []
    for width in (1280, 1920):
        viewport(browser, width)
        for page in pages:
            browser.get(live_server.url + page)
            title = browser.title
            if "Server Error" in title or "Page not found" in title or "Forbidden" in title:
                problems.append(f"{page}: {title}")
                continue
            page_width, window = fits(browser)
            if page_width > window:
                problems.append(f"{page} at {width} px is {page_width} px wide")
            past_edge = browser.execute_script(
                "return [...document.querySelectorAll('#content *')]"
                ".filter(el => el.getClientRects().length"
                " && el.getBoundingClientRect().right > window.innerWidth + 1)"
                ".map(el => el.tagName + '.' + el.className).slice(0, 3)"
            )
            if past_edge:
                problems.append(f"{page} at {width} px: past the edge: {past_edge}")
            slug = page.strip("/").replace("/", "-").replace("?", "-").replace("&", "-")
            shot_path = pages_dir / f"{slug[:120] or 'index'}-{width}.png"
            browser.save_screenshot(str(shot_path))
    assert not problems, "\n".join(problems)


def _request_of(user):
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = user
    return request
