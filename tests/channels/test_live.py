"""The webhook on a real server with background workers: two quick messages of one sender, answered
concurrently by the job runner, make one conversation, answered in order."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from parley.app import create_app
from parley.config import Settings
from tests import migrated
from tests.channels.conftest import ACCESS_TOKEN, APP_SECRET, VERIFY_TOKEN, echo_flow
from tests.conftest import JWT_SECRET, make_token
from tests.live import serve_in_thread
from tests.stubs.whatsapp import StubState, meta_payload, sign, text_message


def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def test_quick_messages_of_one_sender_make_one_conversation(
    tmp_path: Path, graph: tuple[str, StubState], graph_state: StubState
) -> None:
    url = migrated.sqlite_url(tmp_path / "live.db")
    settings = Settings(
        data_dir=tmp_path,
        database_url=url,
        auth_jwt_secret=JWT_SECRET,  # type: ignore[arg-type]
        outbound_allowlist=["127.0.0.1"],
        whatsapp_graph_url=graph[0],
        whatsapp_retry_seconds=0.0,
        log_json=False,
    )
    with serve_in_thread(create_app(settings)) as base, httpx.Client(base_url=base, timeout=30) as http:
        headers = {"Authorization": f"Bearer {make_token('carol')}"}
        org = _ok(http.post("/api/organizations", json={"name": "Live"}, headers=headers))["id"]
        headers["X-Organization-Id"] = org
        flow = _ok(http.post("/api/flows", json={"name": "Echo", "definition": echo_flow()}, headers=headers))
        _ok(http.post(f"/api/flows/{flow['id']}/publish", headers=headers))
        account = _ok(
            http.post(
                "/api/channels/whatsapp/accounts",
                json={
                    "phone_number_id": "555000111",
                    "waba_id": "1",
                    "display_phone_number": "+49 30 555",
                    "verify_token": VERIFY_TOKEN,
                    "access_token": ACCESS_TOKEN,
                    "app_secret": APP_SECRET,
                },
                headers=headers,
            )
        )
        route = {"channel_kind": "whatsapp", "address": account["id"], "flow_id": flow["id"]}
        _ok(http.post("/api/channels/routes", json=route, headers=headers))

        sender = "4917000000001"
        raw = orjson.dumps(
            meta_payload(
                "555000111",
                [text_message("wamid.L1", sender, "eins"), text_message("wamid.L2", sender, "zwei")],
            )
        )
        ack = http.post(
            "/api/channels/whatsapp/webhook",
            content=raw,
            headers={"Content-Type": "application/json", "X-Hub-Signature-256": sign(raw, APP_SECRET)},
        )
        assert _ok(ack)["received"] == 2

        # Wait for the background workers (bounded, so a hang fails instead of blocking the suite).
        deadline = time.monotonic() + 60
        log: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            log = _ok(http.get(f"/api/channels/whatsapp/accounts/{account['id']}/messages", headers=headers))[
                "items"
            ]
            inbound = [m for m in log if m["direction"] == "in"]
            outbound = [m for m in log if m["direction"] == "out"]
            if (
                len(inbound) == 2
                and all(m["status"] != "received" for m in inbound)
                and all(m["status"] != "pending" for m in outbound)
            ):
                break
            time.sleep(0.1)
        inbound = [m for m in log if m["direction"] == "in"]
        assert {m["status"] for m in inbound} == {"processed"}, log
        assert len({m["session_id"] for m in inbound}) == 1, "two messages started two conversations"
        assert graph_state.sent(sender) == [
            "Hallo, hier ist Autohaus Demo. Was kann ich tun?",
            "Sie sagten: eins Was kann ich tun?",
            "Sie sagten: zwei Was kann ich tun?",
        ]
