"""The retry schedule, the delivery row's moves after an attempt and how one POST is judged, shared by
webhooks and notifications."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from parley.kit.delivery import FINAL, Posted, RetryPolicy, excerpt, post_once, settle
from parley.kit.outbound import OutboundPolicy
from tests.live import serve_in_thread

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Row:
    """A delivery as the job leaves it after claiming: sending, its attempt counted."""

    attempts: int
    id: str = "dlv_1"
    organization_id: str = "org_1"
    status: str = "sending"
    next_attempt_at: datetime | None = None
    claimed_at: datetime | None = EPOCH
    delivered_at: datetime | None = None
    last_status_code: int | None = None
    last_error: str | None = "an earlier failure"
    updated_at: datetime = EPOCH


@dataclass(frozen=True)
class Result:
    outcome: str
    status_code: int | None = None


@dataclass
class Schedule:
    delays: list[float] = field(default_factory=lambda: [30.0, 120.0, 600.0])
    max_attempts: int = 5

    def policy(self) -> RetryPolicy:
        return RetryPolicy(self.delays, self.max_attempts)


def test_the_delay_follows_the_list_and_its_last_entry_repeats() -> None:
    policy = Schedule().policy()
    assert [policy.delay(n) for n in range(1, 6)] == [30.0, 120.0, 600.0, 600.0, 600.0]


def test_an_empty_schedule_retries_at_once() -> None:
    assert RetryPolicy([], 3).delay(1) == 0.0


def test_a_delivered_attempt_clears_the_error_and_the_claim() -> None:
    row = Row(attempts=2, next_attempt_at=EPOCH)
    assert settle(row, Schedule().policy(), Result("delivered", 204), "ignored", retry=True) is None
    assert row.status == "delivered" and row.status in FINAL
    assert row.delivered_at is not None and row.delivered_at > EPOCH
    assert row.last_error is None and row.next_attempt_at is None and row.claimed_at is None
    assert row.last_status_code == 204 and row.updated_at == row.delivered_at


def test_a_transient_failure_with_attempts_left_waits_for_the_schedule() -> None:
    row = Row(attempts=2)
    delay = settle(row, Schedule().policy(), Result("transient", 503), "HTTP 503", retry=True)
    assert delay == 120.0
    assert row.status == "retrying" and row.status not in FINAL
    assert row.next_attempt_at == row.updated_at + timedelta(seconds=120)
    assert row.last_error == "HTTP 503" and row.last_status_code == 503 and row.claimed_at is None


@pytest.mark.parametrize(
    ("outcome", "attempts", "retry"),
    [
        ("transient", 5, True),  # the last attempt allowed
        ("transient", 1, False),  # a test send is never retried
        ("permanent", 1, True),
    ],
)
def test_otherwise_the_delivery_fails(outcome: str, attempts: int, retry: bool) -> None:
    row = Row(attempts=attempts, next_attempt_at=EPOCH)
    assert settle(row, Schedule().policy(), Result(outcome, None), "why", retry=retry) is None
    assert row.status == "failed" and row.next_attempt_at is None and row.delivered_at is None
    assert row.last_error == "why" and row.claimed_at is None


def test_an_excerpt_folds_whitespace_and_cuts_at_200_characters() -> None:
    assert excerpt("  a\n\tb  ") == "a b"
    assert excerpt(" \n ") == ""
    assert excerpt("x" * 201) == "x" * 200 + "…" and excerpt("x" * 200) == "x" * 200


async def _answer(request: Request) -> Response:
    code = int(request.path_params["code"])
    headers = {"Location": "/elsewhere"} if 300 <= code < 400 else None
    return PlainTextResponse("  the   receiver\nsaid ", status_code=code, headers=headers)


@pytest.fixture(scope="module")
def answering() -> Iterator[str]:
    with serve_in_thread(Starlette(routes=[Route("/{code:int}", _answer, methods=["POST"])])) as url:
        yield url


LOOPBACK = OutboundPolicy.from_entries(["127.0.0.1"])


@pytest.mark.parametrize(
    ("code", "outcome", "reason"),
    [
        (200, "delivered", None),
        (204, "delivered", None),
        (307, "permanent", "The receiver redirected (HTTP 307); configure the final URL."),
        (400, "permanent", None),
        (404, "permanent", None),
        (408, "transient", None),
        (425, "transient", None),
        (429, "transient", None),
        (500, "transient", None),
        (503, "transient", None),
    ],
)
async def test_a_post_is_judged_by_the_status_it_got(
    answering: str, code: int, outcome: str, reason: str | None
) -> None:
    posted = await post_once(LOOPBACK, f"{answering}/{code}", b"{}", {}, 5.0)
    assert (posted.outcome, posted.status_code, posted.reason) == (outcome, code, reason)
    assert posted.text == ("" if code == 204 else "  the   receiver\nsaid ") and not posted.timed_out


async def test_a_refused_destination_is_permanent_and_a_closed_port_transient(answering: str) -> None:
    refused = await post_once(OutboundPolicy(), f"{answering}/200", b"{}", {}, 5.0)
    assert refused.outcome == "permanent" and refused.status_code is None and refused.reason
    with socket.socket() as bound:  # bound, never listening: the port is ours and refuses connections
        bound.bind(("127.0.0.1", 0))
        closed = await post_once(LOOPBACK, f"http://127.0.0.1:{bound.getsockname()[1]}/200", b"{}", {}, 5.0)
    assert closed == Posted("transient", None, "The receiver cannot be reached.")
