"""The import jobs' tests again, every write and indexing batch stored in bulk
(``BULK_MIN_RECORDS = 1``): the bulk path keeps every rule of the write path (validation,
tenancy, read-only policies, dedupe, keyed upserts and their history, consolidation
marking, observations, cache generations); only the storage step differs."""

from __future__ import annotations

import pytest

from tests.services.test_import_jobs import *  # noqa: F403


@pytest.fixture(autouse=True)
def _every_batch_in_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    from memoryhub import conf

    monkeypatch.setitem(conf.DEFAULTS, "BULK_MIN_RECORDS", 1)
