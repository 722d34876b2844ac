"""Benchmark: a campaign of N contacts against the local Twilio server, and a worker killed mid-campaign.

The platform runs in this process with its in-process job runner (SQLite in a temporary directory);
the Twilio REST stub runs under uvicorn on loopback. A small "carrier" loop here plays the phone
network: every placed call lasts ``--call-seconds`` and then Twilio's signed status callback is posted
(every tenth number is busy first, so retries are exercised with a 0-minute-equivalent backoff moved
forward by the bench).

1. Steady run: dial rate and calls in flight (sampled) against the configured concurrency.
2. Kill: a second campaign; after a third of its contacts were dialed the worker tasks are cancelled
   while a dial is under way (no graceful stop), a new app starts on the same database, the dead
   round's leases are expired (as time would), and the campaign runs to the end. Duplicate dials are
   counted from the Twilio server's own call log.

    .venv/bin/python bench/campaign_bench.py [--contacts 1000] [--concurrency 10] [--call-seconds 0.3]
    .venv/bin/python bench/campaign_bench.py --upload-rows 100000   # only the CSV upload: time, memory

Figures are wall-clock times on a shared machine: compare runs on the same machine only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from sqlalchemy import func, select, update  # noqa: E402
from tests.conftest import JWT_SECRET, auth, make_token  # noqa: E402
from tests.live import serve_in_thread  # noqa: E402
from tests.stubs import twilio as tw_stub  # noqa: E402

from parley.app import create_app  # noqa: E402
from parley.campaigns.models import Campaign, CampaignContact  # noqa: E402
from parley.config import Settings  # noqa: E402
from parley.kit.logging import configure_logging  # noqa: E402
from parley.kit.migrate import upgrade  # noqa: E402

PUBLIC = "https://parley.example"
CALLER = "+4930777000"
FLOW = {
    "language": "en",
    "start_node": "ask",
    "nodes": [{"id": "ask", "type": "collect", "variable": "x", "prompt": "Hello.", "next": "ask"}],
}
ALWAYS = [{"weekdays": [1, 2, 3, 4, 5, 6, 7], "start": "00:00", "end": "24:00"}]


class Carrier:
    """Ends every placed call after ``seconds`` with Twilio's signed status callback."""

    def __init__(self, state: tw_stub.TwilioState, seconds: float) -> None:
        self.state = state
        self.seconds = seconds
        self.client: httpx.AsyncClient | None = None
        self.seen = 0
        self.open: dict[str, float] = {}  # sid -> when it ends
        self.busy_once: set[str] = set()
        self.samples: list[int] = []
        self.max_in_flight = 0

    async def run(self) -> None:
        while True:
            now = time.monotonic()
            for call in self.state.calls[self.seen :]:
                self.open[call["sid"]] = now + self.seconds
            self.seen = len(self.state.calls)
            self.max_in_flight = max(self.max_in_flight, len(self.open))
            self.samples.append(len(self.open))
            for sid, ends in list(self.open.items()):
                if ends > now or self.client is None:
                    continue
                call = next(c for c in self.state.calls if c["sid"] == sid)
                status = "completed"
                if call["To"].endswith("0") and call["To"] not in self.busy_once:
                    self.busy_once.add(call["To"])
                    status = "busy"
                callback = self.state.finish(sid, status)
                del self.open[sid]
                if callback is not None:
                    with contextlib.suppress(httpx.HTTPError):
                        await self.client.post(
                            callback.url[len(PUBLIC) :], data=callback.params, headers=callback.headers
                        )
            await asyncio.sleep(0.01)


async def _org(client: httpx.AsyncClient, twilio_url: str) -> tuple[dict[str, str], str]:
    owner = make_token("bench-owner")
    org = (await client.post("/api/organizations", json={"name": "Bench"}, headers=auth(owner))).json()["id"]
    h = auth(owner, org)
    flow = (await client.post("/api/flows", json={"name": "A", "definition": FLOW}, headers=h)).json()["id"]
    await client.post(f"/api/flows/{flow}/publish", headers=h)
    config = {"account_sid": tw_stub.ACCOUNT_SID, "auth_token": tw_stub.AUTH_TOKEN, "api_base": twilio_url}
    assert (await client.put("/api/providers/twilio/config", json=config, headers=h)).status_code == 200
    await client.post("/api/telephony/numbers", json={"number": CALLER, "provider": "twilio"}, headers=h)
    return h, flow


async def _campaign(
    client: httpx.AsyncClient, h: dict[str, str], flow: str, n: int, prefix: str, conc: int
) -> str:
    body = {
        "name": prefix,
        "flow_id": flow,
        "caller_id": CALLER,
        "windows": ALWAYS,
        "concurrency": conc,
        "max_attempts": 2,
        "retry_backoff_minutes": 1,
    }
    cid = str((await client.post("/api/campaigns", json=body, headers=h)).json()["id"])
    csv = "phone;name\n" + "".join(f"+49170{prefix}{i:05d};Kunde {i}\n" for i in range(n))
    up = await client.post(
        f"/api/campaigns/{cid}/contacts", content=csv.encode(), headers={**h, "Content-Type": "text/csv"}
    )
    assert up.status_code == 200, up.text
    return cid


async def _retries_due(app: Any, cid: str) -> None:
    """The backoff (1 minute) passes instantly: due retries are moved to now."""
    async with app.state.db.write_sessionmaker() as session:
        await session.execute(
            update(CampaignContact)
            .where(CampaignContact.campaign_id == cid, CampaignContact.next_attempt_at.is_not(None))
            .values(next_attempt_at=datetime.now(UTC))
        )
        await session.commit()


async def _status(app: Any, cid: str) -> tuple[str, int]:
    async with app.state.db.sessionmaker() as session:
        status = await session.scalar(select(Campaign.status).where(Campaign.id == cid))
        done = await session.scalar(
            select(func.count()).where(
                CampaignContact.campaign_id == cid,
                CampaignContact.status.not_in(("pending", "dialing", "in_call")),
            )
        )
    return str(status), int(done or 0)


async def _until(app: Any, cid: str, stop: Any, limit: float = 900) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        await _retries_due(app, cid)
        status, done = await _status(app, cid)
        if stop(status, done):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"campaign {cid} did not get there in {limit} s")


def _extra(calls: list[dict[str, str]]) -> int:
    """Dials beyond what is allowed: one per number, two for the numbers the carrier makes busy once."""
    per_number = Counter(c["To"] for c in calls)
    return sum(max(0, k - (2 if to.endswith("0") else 1)) for to, k in per_number.items())


def _settings(data_dir: Path, url: str) -> Settings:
    return Settings(
        data_dir=data_dir,
        database_url=url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        outbound_allowlist=["127.0.0.1"],
        public_url=PUBLIC,
        rate_limit_per_minute=0,
        campaign_poll_seconds=0.2,
        log_level="WARNING",
        log_json=False,
    )


async def run(
    n: int, concurrency: int, seconds: float, data_dir: Path, twilio_url: str, tw: tw_stub.TwilioState
) -> None:
    url = f"sqlite+aiosqlite:///{data_dir / 'bench.db'}"
    settings = _settings(data_dir, url)
    carrier = Carrier(tw, seconds)
    carrier_task = asyncio.create_task(carrier.run())
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://parley.test", timeout=60
        )
        carrier.client = client
        h, flow = await _org(client, twilio_url)
        cid = await _campaign(client, h, flow, n, "1", concurrency)
        started = time.monotonic()
        assert (await client.post(f"/api/campaigns/{cid}/start", headers=h)).status_code == 200
        await _until(app, cid, lambda status, _: status == "completed")
        elapsed = time.monotonic() - started
        dials = len(tw.calls)
        busy_samples = [s for s in carrier.samples if s > 0]
        print(f"steady: {n} contacts, concurrency {concurrency}, calls last {seconds:.2f} s")
        print(f"  {dials} dials ({dials - n} retries) in {elapsed:.1f} s = {dials / elapsed:.1f} dials/s")
        print(f"  ideal at full concurrency: {concurrency / seconds:.1f} dials/s")
        print(
            f"  calls in flight: max {carrier.max_in_flight} (limit {concurrency}), "
            f"median while calling {statistics.median(busy_samples):.0f}"
        )
        print(f"  dials beyond what the retries allow: {_extra(tw.calls)}")

        # --- kill a worker mid-campaign ------------------------------------------------------------
        before = len(tw.calls)
        cid2 = await _campaign(client, h, flow, n, "2", concurrency)
        assert (await client.post(f"/api/campaigns/{cid2}/start", headers=h)).status_code == 200
        await _until(app, cid2, lambda _, done: done >= n // 3)
        tw.hold = threading.Event()  # the next dial hangs inside Twilio ...
        tw.placed.clear()
        await asyncio.to_thread(tw.placed.wait, 60)
        runner = app.state.jobs
        for task in list(runner._tasks):  # ... and the worker dies: no graceful stop
            task.cancel()
        carrier.client = None
        tw.hold.set()
        tw.hold = None
        killed_at = len(tw.calls) - before
        await client.aclose()
    app2 = create_app(settings)
    async with app2.router.lifespan_context(app2):
        # the dead round's lease and its claims' leases run out (as five minutes would)
        past = datetime.now(UTC) - timedelta(seconds=1)
        async with app2.state.db.write_sessionmaker() as session:
            await session.execute(update(Campaign).where(Campaign.id == cid2).values(tick_until=past))
            await session.execute(
                update(CampaignContact)
                .where(CampaignContact.campaign_id == cid2, CampaignContact.status == "dialing")
                .values(lease_until=past)
            )
            await session.commit()
        client2 = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app2), base_url="http://parley.test", timeout=60
        )
        carrier.client = client2
        await client2.post(f"/api/campaigns/{cid2}/pause", headers=h)
        await client2.post(f"/api/campaigns/{cid2}/resume", headers=h)  # a nudge, as recovery gives one
        await _until(app2, cid2, lambda status, _: status == "completed")
        second = tw.calls[before:]
        async with app2.state.db.sessionmaker() as session:
            statuses = dict(
                (
                    await session.execute(
                        select(CampaignContact.status, func.count())
                        .where(CampaignContact.campaign_id == cid2)
                        .group_by(CampaignContact.status)
                    )
                ).all()
            )
        print(f"kill: worker killed after {killed_at} dials of campaign 2; restarted; campaign completed")
        print(
            f"  dials {len(second)} for {n} contacts; dials beyond what the retries allow: {_extra(second)}"
        )
        print(f"  contact statuses: {statuses}")
        await client2.aclose()
    carrier_task.cancel()


async def upload(rows: int, data_dir: Path, twilio_url: str) -> None:
    """One CSV upload of ``rows`` contacts (BOM, semicolons, a quoted field): time and Python memory."""
    import tracemalloc

    url = f"sqlite+aiosqlite:///{data_dir / 'bench.db'}"
    app = create_app(_settings(data_dir, url))
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://parley.test", timeout=600
        )
        h, flow = await _org(client, twilio_url)
        body = {"name": "upload", "flow_id": flow, "caller_id": CALLER, "windows": ALWAYS}
        cid = (await client.post("/api/campaigns", json=body, headers=h)).json()["id"]
        csv = "\ufeffTelefon;Vorname;Notiz\r\n" + "".join(
            f'+4917{i:08d};Kunde {i};"Rückruf; bitte"\r\n' for i in range(rows)
        )
        content = csv.encode()
        tracemalloc.start()
        started = time.perf_counter()
        response = await client.post(
            f"/api/campaigns/{cid}/contacts", content=content, headers={**h, "Content-Type": "text/csv"}
        )
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert response.status_code == 200, response.text[:500]
        print(
            f"upload: {rows} rows, {len(content) / 1e6:.1f} MB CSV in {elapsed:.1f} s ({rows / elapsed:.0f} rows/s)"
        )
        print(
            f"  Python allocations at peak during the request: {peak / 1e6:.1f} MB (the body itself included)"
        )
        cid3 = (await client.post("/api/campaigns", json={**body, "name": "untraced"}, headers=h)).json()[
            "id"
        ]
        started = time.perf_counter()
        again = await client.post(
            f"/api/campaigns/{cid3}/contacts", content=content, headers={**h, "Content-Type": "text/csv"}
        )
        untraced = time.perf_counter() - started
        assert again.status_code == 200, again.text[:500]
        print(f"  the same upload without memory tracing: {untraced:.1f} s ({rows / untraced:.0f} rows/s)")
        bad = csv.replace("+4917" + f"{rows // 2:08d}", "0170-kaputt", 1)
        cid2 = (await client.post("/api/campaigns", json={**body, "name": "bad"}, headers=h)).json()["id"]
        started = time.perf_counter()
        refused = await client.post(
            f"/api/campaigns/{cid2}/contacts", content=bad.encode(), headers={**h, "Content-Type": "text/csv"}
        )
        print(
            f"  one bad row among {rows}: HTTP {refused.status_code} in {time.perf_counter() - started:.1f} s, "
            f"row {refused.json()['detail'][0]['loc'][-1]} named, nothing added"
        )
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--contacts", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--call-seconds", type=float, default=0.3)
    parser.add_argument("--upload-rows", type=int, default=0, help="only measure one CSV upload of this size")
    args = parser.parse_args()
    configure_logging("WARNING", False)
    state = tw_stub.TwilioState()
    state.add_number(CALLER)
    with tempfile.TemporaryDirectory() as tmp, serve_in_thread(tw_stub.make_twilio_stub(state)) as twilio_url:
        upgrade(f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}")
        if args.upload_rows:
            asyncio.run(upload(args.upload_rows, Path(tmp), twilio_url))
            return
        asyncio.run(run(args.contacts, args.concurrency, args.call_seconds, Path(tmp), twilio_url, state))


if __name__ == "__main__":
    main()
