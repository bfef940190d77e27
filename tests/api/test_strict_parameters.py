"""Numbers and dates in requests are read strictly, as their documentation says: ASCII
digits only, a 400 naming the parameter for anything else (Python's own parsers also
read ``1_0``, ``1e3``, ``inf`` and other scripts' digits)."""

from __future__ import annotations

import pytest

from memoryhub.services import write
from tests.factories import key_client

pytestmark = pytest.mark.django_db

RECORDS = "/api/v1/domains/support/records"


@pytest.fixture
def api(tenant, other_tenant):
    write.write(tenant.scope, [{"content": f"fact {n}"} for n in range(5)])
    write.write(other_tenant.scope, [{"content": "globex fact"}])
    return key_client(tenant, can_read=True, can_write=True)


@pytest.mark.parametrize("value", ["abc", "-1", "0", "1e3", "2.0", "\u0663", " 2"])
def test_a_page_size_that_is_not_a_whole_number_from_1_is_a_400(api, value):
    response = api.get(RECORDS, {"page_size": value})
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == ["page_size"]


def test_a_page_size_is_honoured_and_capped(api):
    assert len(api.get(RECORDS, {"page_size": "2"}).json()["results"]) == 2
    listed = api.get(RECORDS, {"page_size": "100000"}).json()["results"]
    assert sorted(item["content"] for item in listed) == [f"fact {n}" for n in range(5)]


@pytest.mark.parametrize("value", ["1_0", "1e1", "inf", "nan", "\u0663", "-1", "31"])
def test_a_wait_that_is_not_a_number_of_seconds_is_a_400(api, value):
    response = api.post(f"{RECORDS}?wait={value}", {"items": [{"content": "x"}]}, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == ["wait"]


def test_a_date_in_other_digits_is_a_400_naming_the_field(api):
    item = {"content": "x", "occurred_at": "\u0662\u0660\u0662\u0665-\u0660\u0663-\u0660\u0661"}
    response = api.post(RECORDS, {"items": [item]}, format="json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["items[0].occurred_at"]
    ok = api.post(
        RECORDS, {"items": [{"content": "y", "occurred_at": "2025-03-01"}]}, format="json"
    )
    assert ok.status_code == 202
