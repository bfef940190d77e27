"""A real browser (Debian's headless Chromium, driven by Selenium) through the admin.

Logs in, creates a read-only knowledge base, imports a Markdown file, finds the
imported text in the retrieval playground, and erases the namespace; a screenshot of
each step is saved under ``test-artifacts/admin/``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from memoryhub.models import KnowledgeBase, MemoryRecord

from .factories import DomainFactory, OrgFactory

pytestmark = pytest.mark.django_db(transaction=True)

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "admin"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
RUNBOOK = """# Incident runbook

## Paging

Page the on-call engineer through the pager rotation; if nobody acknowledges within
ten minutes, escalate to the engineering manager.

## Rollbacks

Rollbacks need two approvers and a ticket. Roll back first, investigate second.
"""


def _browser_or_skip():  # type: ignore[no-untyped-def]
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
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture
def browser():  # type: ignore[no-untyped-def]
    driver = _browser_or_skip()
    driver.implicitly_wait(5)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def shot(browser, name: str) -> None:  # type: ignore[no-untyped-def]
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def test_operator_curates_imports_queries_and_erases(
    browser, live_server, django_user_model, tmp_path
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def wait(condition):  # type: ignore[no-untyped-def]
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
    assert "Imported 2 items from runbook.md" in message.text
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
    browser.find_element(By.CSS_SELECTOR, "#playground-form input[type=submit]").click()
    grounding = wait(ec.presence_of_element_located((By.ID, "playground-grounding"))).text
    assert "[runbook] Rollbacks" in grounding
    assert "two approvers" in browser.find_element(By.ID, "playground-results").text
    shot(browser, "06-playground")

    browser.get(f"{live_server.url}/admin/memoryhub/memoryrecord/erase-subject/")
    Select(browser.find_element(By.NAME, "org")).select_by_visible_text("Acme")
    browser.find_element(By.NAME, "namespace").send_keys("team:oncall")
    browser.find_element(By.CSS_SELECTOR, "#erase-subject-form input[type=submit]").click()
    preview = wait(ec.presence_of_element_located((By.ID, "erasure-preview"))).text
    assert "runbook" in preview
    assert MemoryRecord.unscoped.filter(namespace="team:oncall").count() == 2  # nothing yet
    shot(browser, "07-erase-confirm")
    browser.find_element(By.CSS_SELECTOR, "input[value='Yes, erase']").click()
    receipt = wait(ec.presence_of_element_located((By.ID, "erasure-receipt")))
    assert "Erased 2 records." in receipt.text
    shot(browser, "08-erasure-receipt")
    assert MemoryRecord.unscoped.filter(namespace="team:oncall").count() == 0

    browser.get(f"{live_server.url}/admin/memoryhub/observation/")
    assert wait(ec.presence_of_element_located((By.ID, "observation-chart")))
    shot(browser, "09-observations")
    assert domain.pk
