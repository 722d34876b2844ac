from __future__ import annotations

import importlib.util
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.providers.models import ProviderConfig
from tests.conftest import auth, make_token
from tests.organizations.test_router import ALICE, BOB, create_org
from tests.providers import stubs

ALL_KEYS = {
    "openai",
    "pocketsphinx",
    "deepgram",
    "openai_stt",
    "espeak",
    "elevenlabs",
    "openai_tts",
    "twilio",
    "livekit",
    "smtp",
}


async def setup_org(client: httpx.AsyncClient) -> dict[str, str]:
    org = await create_org(client)
    return auth(ALICE, str(org["id"]))


async def put_config(
    client: httpx.AsyncClient, headers: dict[str, str], key: str, body: dict[str, Any]
) -> Any:
    response = await client.put(f"/api/providers/{key}/config", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


async def run_test(client: httpx.AsyncClient, headers: dict[str, str], key: str) -> dict[str, Any]:
    response = await client.post(f"/api/providers/{key}/test", headers=headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    assert set(result) == {"ok", "latency_ms", "detail"}
    assert result["latency_ms"] >= 0
    return result


async def test_catalog_lists_every_provider_with_schema(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    items = (await client.get("/api/providers", headers=headers)).json()["items"]
    by_key = {item["key"]: item for item in items}
    assert set(by_key) == ALL_KEYS
    assert {k: v["kind"] for k, v in by_key.items()} == {
        "openai": "llm",
        "pocketsphinx": "stt",
        "deepgram": "stt",
        "openai_stt": "stt",
        "espeak": "tts",
        "elevenlabs": "tts",
        "openai_tts": "tts",
        "twilio": "telephony",
        "livekit": "telephony",
        "smtp": "email",
    }
    assert by_key["openai"]["secret_fields"] == ["api_key"]
    schema = by_key["openai"]["config_schema"]
    assert schema["properties"]["api_key"]["x-secret"] is True
    assert schema["properties"]["base_url"]["default"] == "https://api.openai.com/v1"
    assert by_key["twilio"]["config_schema"]["properties"]["api_base"]["default"] == "https://api.twilio.com"
    assert by_key["livekit"]["secret_fields"] == ["api_secret"]
    assert by_key["smtp"]["secret_fields"] == ["password"]
    assert set(by_key["smtp"]["config_schema"]["properties"]) == {
        "host",
        "port",
        "username",
        "password",
        "starttls",
        "from_address",
    }
    assert by_key["pocketsphinx"]["offline"] and by_key["pocketsphinx"]["default"]
    assert by_key["espeak"]["offline"] and by_key["espeak"]["default"]
    assert not any(item["configured"] for item in items)

    stt = (await client.get("/api/providers", params={"kind": "stt"}, headers=headers)).json()["items"]
    assert {item["key"] for item in stt} == {"pocketsphinx", "deepgram", "openai_stt"}


async def test_unknown_provider_is_404_listing_the_keys(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    for method, path in [
        ("GET", "/api/providers/nope/config"),
        ("DELETE", "/api/providers/nope/config"),
        ("POST", "/api/providers/nope/test"),
    ]:
        response = await client.request(method, path, headers=headers)
        assert response.status_code == 404
        assert "openai" in response.json()["detail"] and "smtp" in response.json()["detail"]
    response = await client.put("/api/providers/nope/config", json={}, headers=headers)
    assert response.status_code == 404


async def test_put_masks_and_encrypts_secrets(client: httpx.AsyncClient, db_session: AsyncSession) -> None:
    headers = await setup_org(client)
    body = await put_config(client, headers, "openai", {"api_key": stubs.OPENAI_KEY, "model": "gpt-4o"})
    assert body["config"] == {
        "api_key": "••••6789",
        "base_url": "https://api.openai.com/v1",
        "model": "gpt-4o",
    }
    assert body["secrets_set"] == ["api_key"]
    assert stubs.OPENAI_KEY not in str(body)

    fetched = (await client.get("/api/providers/openai/config", headers=headers)).json()
    assert fetched["config"]["api_key"] == "••••6789"
    assert stubs.OPENAI_KEY not in str(fetched)

    row = await db_session.scalar(select(ProviderConfig).where(ProviderConfig.provider_key == "openai"))
    assert row is not None
    assert stubs.OPENAI_KEY not in str(row.settings) + str(row.secrets)
    assert row.secrets["api_key"].startswith("v1:")
    assert "api_key" not in row.settings

    listed = (await client.get("/api/providers", headers=headers)).json()["items"]
    assert {item["key"] for item in listed if item["configured"]} == {"openai"}


async def test_put_keeps_omitted_or_masked_secrets_and_replaces_new_ones(
    client: httpx.AsyncClient, stub_url: str
) -> None:
    headers = await setup_org(client)
    await put_config(client, headers, "openai", {"api_key": stubs.OPENAI_KEY, "base_url": f"{stub_url}/v1"})
    # Omitted: kept, and still works against the provider.
    body = await put_config(client, headers, "openai", {"base_url": f"{stub_url}/v1/", "model": "whisper-1"})
    assert body["config"]["api_key"] == "••••6789"
    assert body["config"]["base_url"] == f"{stub_url}/v1"
    assert (await run_test(client, headers, "openai"))["ok"] is True
    # Sent back masked, as GET showed it: kept.
    await put_config(client, headers, "openai", {**body["config"]})
    assert (await run_test(client, headers, "openai"))["ok"] is True
    # A new value replaces it.
    body = await put_config(
        client, headers, "openai", {"api_key": "sk-other-key-9999", "base_url": f"{stub_url}/v1"}
    )
    assert body["config"]["api_key"] == "••••9999"
    result = await run_test(client, headers, "openai")
    assert result["ok"] is False
    assert "refused the credentials" in result["detail"]


async def test_put_validates_against_the_provider_schema(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    cases: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
        ("openai", {"model": "gpt-4o"}, ("body", "api_key")),
        ("openai", {"api_key": "sk-1", "base_url": "ftp://example.com"}, ("body", "base_url")),
        ("openai", {"api_key": "sk-1", "base_url": "https://user:pw@example.com/v1"}, ("body", "base_url")),
        ("openai", {"api_key": "sk-1", "organization_id": "org_x"}, ("body", "organization_id")),
        ("twilio", {"account_sid": "XX123", "auth_token": "t"}, ("body", "account_sid")),
        ("smtp", {"host": "smtp.example.com", "port": 70000, "from_address": "a@b.c"}, ("body", "port")),
        ("smtp", {"host": "smtp.example.com"}, ("body", "from_address")),
    ]
    for key, body, loc in cases:
        response = await client.put(f"/api/providers/{key}/config", json=body, headers=headers)
        assert response.status_code == 422, (key, body, response.text)
        assert tuple(response.json()["detail"][0]["loc"]) == loc
    assert (await client.get("/api/providers/openai/config", headers=headers)).status_code == 404


async def test_put_accepts_multipart_with_numbers_as_text(client: httpx.AsyncClient, smtp_port: int) -> None:
    headers = await setup_org(client)
    response = await client.put(
        "/api/providers/smtp/config",
        data={
            "host": "127.0.0.1",
            "port": str(smtp_port),
            "username": stubs.SMTP_USER,
            "password": "123456789",
            "starttls": "false",
            "from_address": "calls@example.com",
        },
        headers=headers,
    )
    assert response.status_code == 200, response.text
    config = response.json()["config"]
    assert config["port"] == smtp_port
    assert config["starttls"] is False
    assert config["password"] == "••••6789"


async def test_delete_config(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    assert (await client.delete("/api/providers/openai/config", headers=headers)).status_code == 404
    created = await put_config(client, headers, "openai", {"api_key": stubs.OPENAI_KEY})
    assert created["key"] == "openai"
    response = await client.delete("/api/providers/openai/config", headers=headers)
    assert response.status_code == 200
    assert response.json()["deleted"] is True
    assert response.json()["id"].startswith("pcfg_")
    assert (await client.get("/api/providers/openai/config", headers=headers)).status_code == 404
    assert (await client.delete("/api/providers/openai/config", headers=headers)).status_code == 404
    assert (await client.post("/api/providers/openai/test", headers=headers)).status_code == 404


async def test_roles_and_tenancy(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    org_id = headers["X-Organization-Id"]
    await put_config(client, headers, "openai", {"api_key": stubs.OPENAI_KEY})
    response = await client.post(
        f"/api/organizations/{org_id}/members", json={"subject": "bob", "role": "viewer"}, headers=headers
    )
    assert response.status_code == 200, response.text
    bob = auth(BOB, org_id)
    assert (await client.get("/api/providers/openai/config", headers=bob)).status_code == 200
    assert (
        await client.put("/api/providers/openai/config", json={"api_key": "x"}, headers=bob)
    ).status_code == 403
    assert (await client.delete("/api/providers/openai/config", headers=bob)).status_code == 403
    assert (await client.post("/api/providers/openai/test", headers=bob)).status_code == 403

    carol = make_token("carol")
    other = await create_org(client, carol, name="Other")
    other_headers = auth(carol, str(other["id"]))
    assert (await client.get("/api/providers/openai/config", headers=other_headers)).status_code == 404
    items = (await client.get("/api/providers", headers=other_headers)).json()["items"]
    assert not any(item["configured"] for item in items)


@pytest.mark.parametrize("key", ["openai", "openai_stt", "openai_tts"])
async def test_openai_compatible_check(client: httpx.AsyncClient, stub_url: str, key: str) -> None:
    headers = await setup_org(client)
    await put_config(client, headers, key, {"api_key": stubs.OPENAI_KEY, "base_url": f"{stub_url}/v1"})
    result = await run_test(client, headers, key)
    assert result["ok"] is True, result
    assert "2 models" in result["detail"]


async def test_openai_check_failures(client: httpx.AsyncClient, stub_url: str) -> None:
    headers = await setup_org(client)
    await put_config(
        client, headers, "openai", {"api_key": "sk-wrong-key-0000", "base_url": f"{stub_url}/v1"}
    )
    result = await run_test(client, headers, "openai")
    assert result["ok"] is False and "HTTP 401" in result["detail"]
    assert "sk-wrong-key-0000" not in result["detail"]

    await put_config(client, headers, "openai", {"base_url": f"{stub_url}/html"})
    result = await run_test(client, headers, "openai")
    assert result["ok"] is False and "not with JSON" in result["detail"]

    await put_config(client, headers, "openai", {"base_url": f"http://127.0.0.1:{stubs.closed_port()}/v1"})
    result = await run_test(client, headers, "openai")
    assert result["ok"] is False and "cannot be reached" in result["detail"]


async def test_twilio_check(client: httpx.AsyncClient, stub_url: str) -> None:
    headers = await setup_org(client)
    base = {"account_sid": stubs.TWILIO_SID, "api_base": stub_url}
    await put_config(client, headers, "twilio", {**base, "auth_token": stubs.TWILIO_TOKEN})
    result = await run_test(client, headers, "twilio")
    assert result["ok"] is True, result
    assert "Werkstatt" in result["detail"]
    await put_config(client, headers, "twilio", {**base, "auth_token": "wrong-token-123"})
    result = await run_test(client, headers, "twilio")
    assert result["ok"] is False and "refused the credentials" in result["detail"]


async def test_livekit_check(client: httpx.AsyncClient, stub_url: str) -> None:
    headers = await setup_org(client)
    ws_url = stub_url.replace("http://", "ws://")
    await put_config(
        client,
        headers,
        "livekit",
        {"url": ws_url, "api_key": stubs.LIVEKIT_KEY, "api_secret": stubs.LIVEKIT_SECRET},
    )
    result = await run_test(client, headers, "livekit")
    assert result["ok"] is True, result
    assert "1 active room" in result["detail"]
    await put_config(
        client, headers, "livekit", {"url": stub_url, "api_key": stubs.LIVEKIT_KEY, "api_secret": "nope-" * 8}
    )
    result = await run_test(client, headers, "livekit")
    assert result["ok"] is False and "refused" in result["detail"]


async def test_deepgram_and_elevenlabs_checks(client: httpx.AsyncClient, stub_url: str) -> None:
    headers = await setup_org(client)
    await put_config(
        client, headers, "deepgram", {"api_key": stubs.DEEPGRAM_KEY, "base_url": f"{stub_url}/v1"}
    )
    assert (await run_test(client, headers, "deepgram"))["ok"] is True
    await put_config(client, headers, "elevenlabs", {"api_key": stubs.ELEVENLABS_KEY, "base_url": stub_url})
    assert (await run_test(client, headers, "elevenlabs"))["ok"] is True
    await put_config(client, headers, "elevenlabs", {"api_key": "bad-key-1234"})
    assert (await run_test(client, headers, "elevenlabs"))["ok"] is False


async def test_smtp_check(client: httpx.AsyncClient, smtp_port: int) -> None:
    headers = await setup_org(client)
    base = {"host": "127.0.0.1", "port": smtp_port, "from_address": "calls@example.com", "starttls": False}
    await put_config(
        client, headers, "smtp", {**base, "username": stubs.SMTP_USER, "password": stubs.SMTP_PASSWORD}
    )
    result = await run_test(client, headers, "smtp")
    assert result["ok"] is True, result
    assert "LOGIN" in result["detail"] and "QUIT" in result["detail"]

    await put_config(
        client, headers, "smtp", {**base, "username": stubs.SMTP_USER, "password": "wrong-password"}
    )
    result = await run_test(client, headers, "smtp")
    assert result["ok"] is False and "refused the login" in result["detail"]

    await put_config(client, headers, "smtp", {**base, "starttls": True, "username": None, "password": None})
    result = await run_test(client, headers, "smtp")
    assert result["ok"] is False and "STARTTLS" in result["detail"]

    await put_config(client, headers, "smtp", {**base, "port": stubs.closed_port()})
    result = await run_test(client, headers, "smtp")
    assert result["ok"] is False and "cannot be reached" in result["detail"]


async def test_offline_engines_report_whether_they_are_installed(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    # No configuration needed: the defaults are checked.
    sphinx = await run_test(client, headers, "pocketsphinx")
    assert sphinx["ok"] is (importlib.util.find_spec("pocketsphinx") is not None)
    if not sphinx["ok"]:
        assert "not installed" in sphinx["detail"]
    espeak = await run_test(client, headers, "espeak")
    installed = importlib.util.find_spec("espeakng_loader") is not None
    assert espeak["ok"] is installed
    assert ("is installed" if installed else "not installed") in espeak["detail"]
    # A voice eSpeak NG lacks, and a recognition language without a model, are named.
    await put_config(client, headers, "espeak", {"voice": "xx-nope"})
    assert "no voice 'xx-nope'" in (await run_test(client, headers, "espeak"))["detail"]
    await put_config(client, headers, "pocketsphinx", {"language": "fr-fr"})
    french = await run_test(client, headers, "pocketsphinx")
    assert french["ok"] is False and "cannot hear 'fr-fr'" in french["detail"]
    await put_config(client, headers, "pocketsphinx", {"language": "de-de"})
    assert (await run_test(client, headers, "pocketsphinx"))["ok"] is True  # German by grammar


async def test_not_configured_provider_cannot_be_tested(client: httpx.AsyncClient) -> None:
    headers = await setup_org(client)
    response = await client.post("/api/providers/twilio/test", headers=headers)
    assert response.status_code == 404
    assert "not configured" in response.json()["detail"]
