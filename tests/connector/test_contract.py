"""Contract of operation #6 on SQLite and PostgreSQL: every field and type, every status, both paths."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from parley.connector import setup
from parley.connector.app import create_connector_app
from parley.connector.config import ConnectorSettings
from parley.connector.demo import generate_orders
from parley.connector.schemas import FIELD_KINDS, FIELD_NAMES, FieldKind, Order
from tests.connector.conftest import DEMO_COUNT, DEMO_REFERENCE, DEMO_SEED, ORDER_BASE

ENVELOPE_KEYS = ["success", "order", "message"]
BAD_IDS = [
    "abc",
    "0",
    "-1",
    "-0",
    "1.5",
    "1e3",
    "99999999999999999999999",
    "9223372036854775808",
    "١٢",
    "%20",
    "0x10",
]


def expected_order(order_id: int) -> dict[str, Any]:
    return list(generate_orders(order_id, seed=DEMO_SEED, reference=DEMO_REFERENCE))[-1]


def assert_spec_types(order: dict[str, Any]) -> None:
    assert list(order) == list(FIELD_NAMES)
    for name, value in order.items():
        kind = FIELD_KINDS[name]
        if kind is FieldKind.INTEGER:
            assert type(value) is int, name
        elif kind is FieldKind.NUMBER:
            assert type(value) in (int, float), name
        elif kind is FieldKind.JSON:
            assert value is None or isinstance(value, dict | list | str | int | float | bool), name
        else:
            assert type(value) is str, name


@pytest.mark.parametrize("path", ["fast", "fastapi"])
async def test_found_order_has_every_field_in_spec_types(
    client: httpx.AsyncClient, api_client: httpx.AsyncClient, api_key: str, path: str
) -> None:
    http = client if path == "fast" else api_client
    for order_id in (1, 7, DEMO_COUNT):
        response = await http.get(f"{ORDER_BASE}{order_id}", headers={"X-API-Key": api_key})
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert response.headers["cache-control"] == "no-store"
        body = response.json()
        assert list(body) == ENVELOPE_KEYS
        assert body["success"] is True
        assert body["message"] == f"Order {order_id} found."
        assert_spec_types(body["order"])
        assert body["order"] == expected_order(order_id)
        Order.model_validate(body["order"])


async def test_fast_path_and_fastapi_send_identical_bytes(
    client: httpx.AsyncClient, api_client: httpx.AsyncClient, api_key: str
) -> None:
    for order_id in ("3", "0003", str(DEMO_COUNT + 1)):
        fast = await client.get(f"{ORDER_BASE}{order_id}", headers={"X-API-Key": api_key})
        slow = await api_client.get(f"{ORDER_BASE}{order_id}", headers={"X-API-Key": api_key})
        assert (fast.status_code, fast.content) == (slow.status_code, slow.content)


async def test_json_fields_are_objects_or_null(client: httpx.AsyncClient, api_key: str) -> None:
    seen: set[str] = set()
    for order_id in range(1, 40):
        order = (await client.get(f"{ORDER_BASE}{order_id}", headers={"X-API-Key": api_key})).json()["order"]
        for name in ("insurance_json", "costs_json"):
            value = order[name]
            assert value is None or isinstance(value, dict)
            seen.add(f"{name}:{'null' if value is None else 'object'}")
    assert seen == {"insurance_json:null", "insurance_json:object", "costs_json:null", "costs_json:object"}


@pytest.mark.parametrize("path", ["fast", "fastapi"])
async def test_unknown_order_is_404_envelope_naming_the_id(
    client: httpx.AsyncClient, api_client: httpx.AsyncClient, api_key: str, path: str
) -> None:
    http = client if path == "fast" else api_client
    response = await http.get(f"{ORDER_BASE}987654321", headers={"X-API-Key": api_key})
    assert response.status_code == 404
    assert response.json() == {"success": False, "order": None, "message": "Order 987654321 was not found."}


@pytest.mark.parametrize("bad_id", BAD_IDS)
async def test_invalid_ids_get_fastapi_validation_body_on_both_paths(
    client: httpx.AsyncClient, api_client: httpx.AsyncClient, api_key: str, bad_id: str
) -> None:
    fast = await client.get(f"{ORDER_BASE}{bad_id}", headers={"X-API-Key": api_key})
    slow = await api_client.get(f"{ORDER_BASE}{bad_id}", headers={"X-API-Key": api_key})
    assert fast.status_code == slow.status_code == 422
    assert fast.content == slow.content
    (error,) = fast.json()["detail"]
    assert error["loc"] == ["path", "order_id"]
    assert isinstance(error["msg"], str) and error["msg"]
    assert error["type"] in {"int_parsing", "greater_than_equal", "less_than_equal"}
    assert "input" in error
    if error["type"] != "int_parsing":
        assert set(error["ctx"]) == {"ge"} or set(error["ctx"]) == {"le"}


async def test_422_body_shape_is_exact(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.get(f"{ORDER_BASE}0", headers={"X-API-Key": api_key})
    assert response.json() == {
        "detail": [
            {
                "type": "greater_than_equal",
                "loc": ["path", "order_id"],
                "msg": "Input should be greater than or equal to 1",
                "input": "0",
                "ctx": {"ge": 1},
            }
        ]
    }
    huge = await client.get(f"{ORDER_BASE}99999999999999999999999", headers={"X-API-Key": api_key})
    assert huge.json()["detail"][0]["ctx"] == {"le": 2**63 - 1}
    text = await client.get(f"{ORDER_BASE}abc", headers={"X-API-Key": api_key})
    assert text.json()["detail"][0] == {
        "type": "int_parsing",
        "loc": ["path", "order_id"],
        "msg": "Input should be a valid integer, unable to parse string as an integer",
        "input": "abc",
    }


@pytest.mark.parametrize("path", ["fast", "fastapi"])
@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "Missing API key: send it in the X-API-Key header."),
        ({"X-API-Key": ""}, "Missing API key: send it in the X-API-Key header."),
        ({"X-API-Key": "nope"}, "Invalid or revoked API key."),
        ({"X-API-Key": "pcn_000000000000_guess"}, "Invalid or revoked API key."),
        ({"X-API-Key": "x" * 8000}, "Invalid or revoked API key."),
        ({"X-API-Key": "pcn_ä"}, "Invalid or revoked API key."),
    ],
)
async def test_missing_or_unknown_key_is_401_before_the_id_is_validated(
    client: httpx.AsyncClient,
    api_client: httpx.AsyncClient,
    headers: dict[str, str],
    message: str,
    path: str,
) -> None:
    http = client if path == "fast" else api_client
    encoded = {k.encode(): v.encode() for k, v in headers.items()}
    for order_id in ("1", "abc", "0"):
        response = await http.get(f"{ORDER_BASE}{order_id}", headers=encoded)
        assert response.status_code == 401
        assert response.json() == {"success": False, "order": None, "message": message}
        assert response.headers["www-authenticate"] == "X-API-Key"


async def test_wrong_secret_of_a_real_key_id_is_rejected(client: httpx.AsyncClient, api_key: str) -> None:
    forged = api_key[: api_key.rindex("_") + 1] + "A" * 43
    response = await client.get(f"{ORDER_BASE}1", headers={"X-API-Key": forged})
    assert response.status_code == 401


@pytest.mark.parametrize("param", ["api_key", "apikey", "key", "X-API-Key", "token", "access_token"])
async def test_key_in_query_string_is_refused(client: httpx.AsyncClient, api_key: str, param: str) -> None:
    for headers in ({}, {"X-API-Key": api_key}):
        response = await client.get(f"{ORDER_BASE}1", params={param: api_key}, headers=headers)
        assert response.status_code == 400
        body = response.json()
        assert body["success"] is False and body["order"] is None
        assert "X-API-Key header" in body["message"]


async def test_unrelated_query_parameters_are_ignored(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.get(f"{ORDER_BASE}2", params={"lang": "de"}, headers={"X-API-Key": api_key})
    assert response.status_code == 200


async def test_revoked_key_is_rejected_within_the_cache_lifetime(
    client: httpx.AsyncClient, backend: ConnectorSettings
) -> None:
    key = await asyncio.to_thread(setup.create_key, backend, "soon-revoked")
    assert (await client.get(f"{ORDER_BASE}1", headers={"X-API-Key": key})).status_code == 200

    from parley.connector.db import engine_scope
    from parley.connector.keys import revoke_key

    async with engine_scope(backend) as engine:
        await revoke_key(engine, "soon-revoked")
    await asyncio.sleep(backend.key_cache_seconds * 3)  # the key table is trusted for key_cache_seconds
    response = await client.get(f"{ORDER_BASE}1", headers={"X-API-Key": key})
    assert response.status_code == 401
    assert response.json()["message"] == "Invalid or revoked API key."


@pytest.mark.parametrize("path", ["fast", "fastapi"])
async def test_per_key_rate_limit_is_429_with_retry_after(
    make_client: Callable[..., httpx.AsyncClient],
    settings_for: Callable[..., ConnectorSettings],
    api_key: str,
    path: str,
) -> None:
    http = make_client(settings_for(rate_limit=3), fast_path=path == "fast")
    statuses = [
        (await http.get(f"{ORDER_BASE}1", headers={"X-API-Key": api_key})).status_code for _ in range(4)
    ]
    assert statuses == [200, 200, 200, 429]
    limited = await http.get(f"{ORDER_BASE}1", headers={"X-API-Key": api_key})
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1
    assert limited.json() == {
        "success": False,
        "order": None,
        "message": "Rate limit of 3 requests per minute for this key exceeded.",
    }


async def test_rate_limit_zero_disables_it(
    make_client: Callable[..., httpx.AsyncClient],
    settings_for: Callable[..., ConnectorSettings],
    api_key: str,
) -> None:
    http = make_client(settings_for(rate_limit=0))
    for _ in range(50):
        assert (await http.get(f"{ORDER_BASE}1", headers={"X-API-Key": api_key})).status_code == 200


@pytest.fixture
async def one_app() -> AsyncIterator[Callable[..., Callable[[str], httpx.AsyncClient]]]:
    """One connector app (one gate, one failure counter) reached from several client addresses."""
    apps: list[Any] = []
    clients: list[httpx.AsyncClient] = []

    def build(settings: ConnectorSettings, *, fast_path: bool = True) -> Callable[[str], httpx.AsyncClient]:
        app = create_connector_app(settings, fast_path=fast_path)
        apps.append(app)

        def from_address(address: str) -> httpx.AsyncClient:
            transport = httpx.ASGITransport(app=app, client=(address, 50000))
            clients.append(httpx.AsyncClient(transport=transport, base_url="http://connector"))
            return clients[-1]

        return from_address

    yield build
    for http in clients:
        await http.aclose()
    for app in apps:
        await app.aclose()


@pytest.mark.parametrize("path", ["fast", "fastapi"])
async def test_failed_key_attempts_block_that_key_never_the_address(
    one_app: Callable[..., Callable[[str], httpx.AsyncClient]],
    settings_for: Callable[..., ConnectorSettings],
    api_key: str,
    path: str,
) -> None:
    connect = one_app(settings_for(auth_failure_limit=3), fast_path=path == "fast")
    key_id = api_key.split("_")[1]
    wrong = f"pcn_{key_id}_not-the-secret"
    attacker = connect("203.0.113.9")
    for _ in range(3):
        assert (await attacker.get(f"{ORDER_BASE}1", headers={"X-API-Key": wrong})).status_code == 401
    for key in (wrong, api_key):
        blocked = await attacker.get(f"{ORDER_BASE}1", headers={"X-API-Key": key})
        assert blocked.status_code == 429
        assert int(blocked.headers["retry-after"]) >= 1
        assert blocked.json()["success"] is False
        assert blocked.json()["message"] == "Too many failed attempts with this API key; retry later."
    # The same key from the same address, acting for another organization of the platform, still works.
    other_org = {"X-API-Key": api_key, "X-Parley-Organization": "org_other"}
    assert (await attacker.get(f"{ORDER_BASE}1", headers=other_org)).status_code == 200
    # Another address is unaffected.
    other = connect("198.51.100.7")
    assert (await other.get(f"{ORDER_BASE}1", headers={"X-API-Key": api_key})).status_code == 200

    # Malformed guesses carry no key id: they never block a real key from that address.
    guesser = connect("203.0.113.10")
    for _ in range(5):
        assert (await guesser.get(f"{ORDER_BASE}1", headers={"X-API-Key": "guess"})).status_code in (401, 429)
    assert (await guesser.get(f"{ORDER_BASE}1", headers={"X-API-Key": api_key})).status_code == 200


async def test_a_key_guessed_from_many_addresses_is_blocked_everywhere(
    one_app: Callable[..., Callable[[str], httpx.AsyncClient]],
    settings_for: Callable[..., ConnectorSettings],
    api_key: str,
) -> None:
    connect = one_app(settings_for(auth_failure_limit=2))
    wrong = f"pcn_{api_key.split('_')[1]}_not-the-secret"
    for n in range(2 * 10):  # the key id's own budget: ten times the per-address limit
        http = connect(f"192.0.2.{n + 1}")
        assert (await http.get(f"{ORDER_BASE}1", headers={"X-API-Key": wrong})).status_code == 401
    fresh = connect("192.0.2.200")
    assert (await fresh.get(f"{ORDER_BASE}1", headers={"X-API-Key": api_key})).status_code == 429


async def test_unknown_paths_and_methods_keep_fastapi_bodies(client: httpx.AsyncClient, api_key: str) -> None:
    headers = {"X-API-Key": api_key}
    for path in ("/", "/api/orders", "/api/orders/1/extra", "/api/order/1", "/api/orders/"):
        response = await client.get(path, headers=headers)
        assert response.status_code == 404, path
        assert response.json() == {"detail": "Not Found"}
    response = await client.post(f"{ORDER_BASE}1", headers=headers)
    assert response.status_code == 405
    assert response.json() == {"detail": "Method Not Allowed"}


async def test_healthz(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}


async def test_unreachable_store_is_503_never_500(
    make_client: Callable[..., httpx.AsyncClient], tmp_path: Any
) -> None:
    settings = ConnectorSettings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    http = make_client(settings)
    response = await http.get(f"{ORDER_BASE}1", headers={"X-API-Key": "pcn_000000000000_x"})
    assert response.status_code == 503
    assert response.json()["success"] is False
    assert (await http.get("/healthz")).status_code == 503


async def test_openapi_documents_the_operation_completely(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    operation = spec["paths"]["/api/orders/{order_id}"]["get"]
    assert operation["summary"] == "Get order details"
    assert operation["tags"] == ["Orders"]
    assert set(operation["responses"]) == {"200", "400", "401", "404", "422", "429", "503"}
    assert "Retry-After" in operation["responses"]["429"]["headers"]
    assert operation["security"] == [{"APIKeyHeader": []}]
    scheme = spec["components"]["securitySchemes"]["APIKeyHeader"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == ("apiKey", "header", "X-API-Key")
    (param,) = operation["parameters"]
    assert param["schema"]["type"] == "integer" and param["schema"]["minimum"] == 1
    schemas = spec["components"]["schemas"]
    order = schemas["Order"]
    assert list(order["properties"]) == list(FIELD_NAMES)
    assert set(order["required"]) == set(FIELD_NAMES)
    json_types = {FieldKind.INTEGER: "integer", FieldKind.NUMBER: "number", FieldKind.STRING: "string"}
    json_types[FieldKind.DATE] = "string"
    for name, kind in FIELD_KINDS.items():
        if kind is not FieldKind.JSON:
            assert order["properties"][name]["type"] == json_types[kind], name
    assert set(schemas["ValidationError"]["properties"]) >= {"loc", "msg", "type", "input", "ctx"}
    assert set(schemas["ErrorEnvelope"]["properties"]) == {"success", "order", "message"}


async def test_concurrent_first_requests_all_see_the_loaded_keys(
    make_client: Callable[..., httpx.AsyncClient], backend: ConnectorSettings, api_key: str
) -> None:
    # A fresh process: the key table is loaded by the first request while the others wait for it.
    http = make_client(backend)
    responses = await asyncio.gather(
        *(http.get(f"{ORDER_BASE}{i}", headers={"X-API-Key": api_key}) for i in range(1, 41))
    )
    assert [r.status_code for r in responses] == [200] * 40
