"""The time window list endpoints share: since is inclusive, until exclusive, naive times are UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from parley.kit.errors import BadRequest
from parley.kit.filters import created_within
from parley.webhooks.models import WebhookDelivery


def _where(since: datetime | None, until: datetime | None) -> tuple[str, dict[str, object]]:
    stmt = created_within(select(WebhookDelivery.id), WebhookDelivery.created_at, since, until)
    compiled = stmt.compile()
    return str(compiled).split("WHERE", 1)[-1] if stmt.whereclause is not None else "", compiled.params


def test_no_bounds_adds_nothing() -> None:
    assert _where(None, None) == ("", {})


def test_since_is_inclusive_and_until_exclusive_in_utc() -> None:
    since = datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    clause, params = _where(since, datetime(2026, 1, 2))
    assert "created_at >= :created_at_1" in clause and "created_at < :created_at_2" in clause
    assert params == {
        "created_at_1": datetime(2026, 1, 1, 10, tzinfo=UTC),
        "created_at_2": datetime(2026, 1, 2, tzinfo=UTC),
    }


def test_a_time_beyond_utc_is_a_bad_request_naming_the_parameter() -> None:
    with pytest.raises(BadRequest, match="until is out of range"):
        _where(None, datetime.max.replace(tzinfo=timezone(timedelta(hours=-1))))
