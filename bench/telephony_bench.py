"""Benchmark: telephony sync and the Twilio voice webhook, in process, against the local stubs.

1. Sync: N inbound trunks and N dispatch rules pushed to the LiveKit Twirp stub (first run creates,
   second finds everything unchanged), plus N Twilio numbers given their webhook.
2. Webhook: M signed incoming calls (each a new CallSid, so each starts a session) and M retries.

    .venv/bin/python bench/telephony_bench.py [--resources 50] [--calls 100]

The platform runs in this process over ASGI (SQLite in a temporary directory); the stubs under uvicorn
on loopback. Figures are wall-clock times on a shared machine: compare runs on the same machine only.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.conftest import JWT_SECRET, auth, make_token  # noqa: E402
from tests.live import serve_in_thread  # noqa: E402
from tests.stubs import livekit as lk_stub  # noqa: E402
from tests.stubs import twilio as tw_stub  # noqa: E402

from parley.app import create_app  # noqa: E402
from parley.config import Settings  # noqa: E402
from parley.kit.logging import configure_logging  # noqa: E402
from parley.kit.migrate import upgrade  # noqa: E402
from parley.telephony.providers.twilio import compute_signature  # noqa: E402

PUBLIC = "https://parley.example"
FLOW = {
    "language": "en",
    "start_node": "ask",
    "nodes": [{"id": "ask", "type": "collect", "variable": "x", "prompt": "Hello.", "next": "ask"}],
}


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[int(len(ordered) * 0.95) - 1]
    return f"p50 {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms"


async def run(
    resources: int, calls: int, data_dir: Path, livekit_url: str, twilio_url: str, tw: tw_stub.TwilioState
) -> None:
    url = f"sqlite+aiosqlite:///{data_dir / 'bench.db'}"
    settings = Settings(
        data_dir=data_dir,
        database_url=url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        admin_subjects=["bench-admin"],
        outbound_allowlist=["127.0.0.1"],
        public_url=PUBLIC,
        rate_limit_per_minute=0,
        log_level="WARNING",
        log_json=False,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://parley.test", timeout=60
        )
        owner = make_token("bench-owner")
        org = (await client.post("/api/organizations", json={"name": "Bench"}, headers=auth(owner))).json()[
            "id"
        ]
        h = auth(owner, org)
        flow = (await client.post("/api/flows", json={"name": "A", "definition": FLOW}, headers=h)).json()[
            "id"
        ]
        await client.post(f"/api/flows/{flow}/publish", headers=h)
        await client.put(
            "/api/providers/livekit/config",
            json={"url": livekit_url, "api_key": lk_stub.API_KEY, "api_secret": lk_stub.API_SECRET},
            headers=h,
        )
        await client.put(
            "/api/providers/twilio/config",
            json={
                "account_sid": tw_stub.ACCOUNT_SID,
                "auth_token": tw_stub.AUTH_TOKEN,
                "api_base": twilio_url,
            },
            headers=h,
        )
        for i in range(resources):
            trunk = (
                await client.post(
                    "/api/telephony/trunks",
                    json={"name": f"t{i}", "direction": "inbound", "numbers": [f"+4930100{i:04d}"]},
                    headers=h,
                )
            ).json()["id"]
            await client.post(
                "/api/telephony/dispatch-rules",
                json={"name": f"r{i}", "rule_type": "individual", "room_prefix": "c-", "trunk_ids": [trunk]},
                headers=h,
            )
            number = f"+4940200{i:04d}"
            tw.add_number(number)
            await client.post(
                "/api/telephony/numbers",
                json={"number": number, "provider": "twilio", "flow_id": flow},
                headers=h,
            )
        admin = auth(make_token("bench-admin"))
        for label in ("first sync (creates)", "second sync (unchanged)"):
            started = time.perf_counter()
            report = (
                await client.post(f"/api/admin/organizations/{org}/telephony/sync", headers=admin)
            ).json()
            took = time.perf_counter() - started
            counts = {k: len(report[k]) for k in ("created", "updated", "unchanged", "orphaned", "errors")}
            print(
                f"{label}: {resources} trunks + {resources} rules + {resources} numbers in {took:.2f} s {counts}"
            )

        first: list[float] = []
        retries: list[float] = []
        for i in range(calls):
            form = [
                ("AccountSid", tw_stub.ACCOUNT_SID),
                ("CallSid", f"CA{i:032x}"),
                ("From", "+491701234567"),
                ("To", f"+4940200{i % resources:04d}"),
            ]
            body = urlencode(form).encode()
            headers = {
                "Content-Type": "application/x-www-form-urlencoded",
                "X-Twilio-Signature": compute_signature(
                    tw_stub.AUTH_TOKEN, PUBLIC + "/api/telephony/twilio/voice", form
                ),
            }
            for bucket in (first, retries):
                started = time.perf_counter()
                response = await client.post("/api/telephony/twilio/voice", content=body, headers=headers)
                bucket.append(time.perf_counter() - started)
                assert response.status_code == 200 and "<Stream" in response.text, response.text
        print(f"webhook, new call (starts a session): {_ms(first)} over {calls} calls")
        print(f"webhook, Twilio retry (same CallSid): {_ms(retries)} over {calls} calls")
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--resources", type=int, default=50)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    configure_logging("WARNING", False)
    lk, tw = lk_stub.LiveKitState(), tw_stub.TwilioState()
    with (
        tempfile.TemporaryDirectory() as tmp,
        serve_in_thread(lk_stub.make_livekit_stub(lk)) as livekit_url,
        serve_in_thread(tw_stub.make_twilio_stub(tw)) as twilio_url,
    ):
        upgrade(f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}")
        asyncio.run(run(args.resources, args.calls, Path(tmp), livekit_url, twilio_url, tw))


if __name__ == "__main__":
    main()
