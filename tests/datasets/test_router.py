from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import auth, make_token
from tests.organizations.test_router import ALICE, BOB, create_org

CAROL = make_token("carol", name="Carol")


@pytest.fixture
async def org(client: httpx.AsyncClient) -> dict[str, Any]:
    return await create_org(client)


@pytest.fixture
def headers(org: dict[str, Any]) -> dict[str, str]:
    return auth(ALICE, str(org["id"]))


async def make_dataset(client: httpx.AsyncClient, headers: dict[str, str], **body: Any) -> Any:
    response = await client.post("/api/datasets", json={"name": "Regression", **body}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


async def test_dataset_crud(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    created = await make_dataset(client, headers, description="Wo ist mein Auto?", tags=["voice", "de", "de"])
    assert created["id"].startswith("ds_")
    assert created["tags"] == ["de", "voice"]
    assert created["item_count"] == 0
    fetched = (await client.get(f"/api/datasets/{created['id']}", headers=headers)).json()
    assert fetched == created
    listed = (await client.get("/api/datasets", headers=headers)).json()
    assert [d["id"] for d in listed["items"]] == [created["id"]]
    clash = await client.post("/api/datasets", json={"name": "Regression"}, headers=headers)
    assert clash.status_code == 409
    deleted = await client.delete(f"/api/datasets/{created['id']}", headers=headers)
    assert deleted.json() == {"id": created["id"], "deleted": True}
    assert (await client.get(f"/api/datasets/{created['id']}", headers=headers)).status_code == 404


async def test_create_from_form_fields(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    response = await client.post(
        "/api/datasets", files={"name": (None, "Form"), "tags": (None, '["a", "b"]')}, headers=headers
    )
    assert response.status_code == 200, response.text
    assert response.json()["tags"] == ["a", "b"]


async def test_patch_changes_only_given_fields(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    dataset = await make_dataset(client, headers, description="first", tags=["a", "b"])
    url = f"/api/datasets/{dataset['id']}"
    renamed = (await client.patch(url, json={"name": "Renamed"}, headers=headers)).json()
    assert (renamed["name"], renamed["description"], renamed["tags"]) == ("Renamed", "first", ["a", "b"])
    retagged = (await client.patch(url, json={"tags": ["b", "c"]}, headers=headers)).json()
    assert (retagged["name"], retagged["tags"]) == ("Renamed", ["b", "c"])
    cleared = (await client.patch(url, json={"description": None}, headers=headers)).json()
    assert cleared["description"] is None and cleared["tags"] == ["b", "c"]
    untouched = await client.patch(url, json={}, headers=headers)
    assert untouched.status_code == 200 and untouched.json()["name"] == "Renamed"
    await make_dataset(client, headers, name="Other")
    clash = await client.patch(url, json={"name": "Other"}, headers=headers)
    assert clash.status_code == 409
    bad = await client.patch(url, json={"organization_id": "org_x"}, headers=headers)
    assert bad.status_code == 422


async def test_list_filters_by_tag_and_paginates(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    first = await make_dataset(client, headers, name="One", tags=["smoke"])
    second = await make_dataset(client, headers, name="Two", tags=["smoke", "nightly"])
    await make_dataset(client, headers, name="Three", tags=["nightly"])
    smoke = (await client.get("/api/datasets", params={"tag": "smoke"}, headers=headers)).json()
    assert [d["id"] for d in smoke["items"]] == [second["id"], first["id"]]
    page = (await client.get("/api/datasets", params={"limit": 2}, headers=headers)).json()
    assert len(page["items"]) == 2 and page["next_cursor"]
    rest = (
        await client.get("/api/datasets", params={"limit": 2, "cursor": page["next_cursor"]}, headers=headers)
    ).json()
    assert [d["id"] for d in rest["items"]] == [first["id"]]


async def test_items_one_and_batch(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    dataset = await make_dataset(client, headers)
    url = f"/api/datasets/{dataset['id']}/items"
    one = await client.post(
        url, json={"data": {"input": "Wo ist mein Auto?", "expected": "fertig"}}, headers=headers
    )
    assert one.status_code == 200, one.text
    [item] = one.json()["items"]
    assert item["id"].startswith("dsi_") and item["dataset_id"] == dataset["id"]
    batch = await client.post(url, json={"items": [{"data": {"n": i}} for i in range(3)]}, headers=headers)
    assert [i["data"] for i in batch.json()["items"]] == [{"n": 0}, {"n": 1}, {"n": 2}]
    listed = (await client.get(url, params={"limit": 3}, headers=headers)).json()
    assert [i["data"] for i in listed["items"]] == [{"n": 2}, {"n": 1}, {"n": 0}]
    assert (await client.get(f"/api/datasets/{dataset['id']}", headers=headers)).json()["item_count"] == 4

    got = await client.get(f"{url}/{item['id']}", headers=headers)
    assert got.json()["data"] == {"input": "Wo ist mein Auto?", "expected": "fertig"}
    deleted = await client.delete(f"{url}/{item['id']}", headers=headers)
    assert deleted.json() == {"id": item["id"], "deleted": True}
    assert (await client.get(f"{url}/{item['id']}", headers=headers)).status_code == 404

    other = await make_dataset(client, headers, name="Other")
    wrong = await client.get(
        f"/api/datasets/{other['id']}/items/{batch.json()['items'][0]['id']}", headers=headers
    )
    assert wrong.status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"data": {"a": 1}, "items": [{"data": {"b": 2}}]},
        {"data": [1, 2]},
        {"items": []},
        {"data": {"big": "x" * (64 * 1024)}},
        {"items": [{"data": {"big": "x" * (64 * 1024)}}]},
    ],
)
async def test_invalid_items_are_refused(
    client: httpx.AsyncClient, headers: dict[str, str], body: Any
) -> None:
    dataset = await make_dataset(client, headers)
    response = await client.post(f"/api/datasets/{dataset['id']}/items", json=body, headers=headers)
    assert response.status_code == 422
    assert (await client.get(f"/api/datasets/{dataset['id']}", headers=headers)).json()["item_count"] == 0


async def test_csv_import_with_bom_semicolons_and_umlauts(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    dataset = await make_dataset(client, headers)
    csv = (
        "input;expected;sprache\r\n"
        'Wo ist mein Auto?;"Ihr Wagen ist fertig; Abholung ab 16 Uhr";de\r\n'
        "Was kostet die Prüfung?;Die Hauptuntersuchung kostet 139 €;de\r\n"
        "\r\n"
    )
    response = await client.post(
        f"/api/datasets/{dataset['id']}/import",
        files={"file": ("fragen.csv", "\ufeff".encode() + csv.encode())},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"imported": 2, "skipped": 0, "format": "csv", "errors": []}
    items = (await client.get(f"/api/datasets/{dataset['id']}/items", headers=headers)).json()["items"]
    assert sorted(i["data"]["input"] for i in items) == ["Was kostet die Prüfung?", "Wo ist mein Auto?"]
    assert {
        "input": "Wo ist mein Auto?",
        "expected": "Ihr Wagen ist fertig; Abholung ab 16 Uhr",
        "sprache": "de",
    } in [i["data"] for i in items]


async def test_csv_in_windows_1252_with_commas(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    dataset = await make_dataset(client, headers)
    data = "input,expected\nGrüße,Schöne Grüße zurück\n".encode("cp1252")
    response = await client.post(
        f"/api/datasets/{dataset['id']}/import", files={"file": ("x.csv", data)}, headers=headers
    )
    assert response.json()["imported"] == 1
    items = (await client.get(f"/api/datasets/{dataset['id']}/items", headers=headers)).json()["items"]
    assert items[0]["data"] == {"input": "Grüße", "expected": "Schöne Grüße zurück"}


async def test_csv_row_with_wrong_field_count(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    dataset = await make_dataset(client, headers)
    data = b"input,expected\na,b\nonly-one\nc,d\n"
    response = await client.post(
        f"/api/datasets/{dataset['id']}/import", files={"file": ("x.csv", data)}, headers=headers
    )
    assert response.json() == {
        "imported": 0,
        "skipped": 0,
        "format": "csv",
        "errors": [{"line": 3, "message": "the row has 1 fields, the header has 2"}],
    }


JSONL = b'{"input": "a", "expected": "A"}\n\n[1, 2]\n{"input": "b"}\n{not json}\n'


async def test_jsonl_with_bad_lines_imports_nothing(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    dataset = await make_dataset(client, headers)
    response = await client.post(
        f"/api/datasets/{dataset['id']}/import", files={"file": ("cases.jsonl", JSONL)}, headers=headers
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["imported"] == 0 and body["format"] == "jsonl"
    assert [e["line"] for e in body["errors"]] == [3, 5]
    assert "JSON object is expected" in body["errors"][0]["message"]
    assert "not valid JSON" in body["errors"][1]["message"]
    assert (await client.get(f"/api/datasets/{dataset['id']}", headers=headers)).json()["item_count"] == 0


@pytest.mark.parametrize("how", ["query", "form"])
async def test_skip_invalid_imports_the_valid_rows(
    client: httpx.AsyncClient, headers: dict[str, str], how: str
) -> None:
    dataset = await make_dataset(client, headers)
    files: dict[str, Any] = {"file": ("cases.jsonl", JSONL)}
    params = {}
    if how == "query":
        params["skip_invalid"] = "true"
    else:
        files["skip_invalid"] = (None, "true")
    response = await client.post(
        f"/api/datasets/{dataset['id']}/import", files=files, params=params, headers=headers
    )
    body = response.json()
    assert (body["imported"], body["skipped"], len(body["errors"])) == (2, 2, 2)
    items = (await client.get(f"/api/datasets/{dataset['id']}/items", headers=headers)).json()["items"]
    assert sorted(orjson.dumps(i["data"]).decode() for i in items) == [
        '{"input":"a","expected":"A"}',
        '{"input":"b"}',
    ]


async def test_import_refusals(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    dataset = await make_dataset(client, headers)
    url = f"/api/datasets/{dataset['id']}/import"
    assert (await client.post(url, json={"file": "x"}, headers=headers)).status_code == 415
    assert (await client.post(url, files={"name": (None, "x")}, headers=headers)).status_code == 422
    empty = await client.post(url, files={"file": ("x.csv", b"")}, headers=headers)
    assert empty.status_code == 422
    assert empty.json()["detail"] == [
        {
            "type": "unprocessable",
            "loc": ["body", "file"],
            "msg": "The uploaded file is empty.",
            "input": None,
        }
    ]
    too_big = b"input\n" + b"x" * (10 * 1024 * 1024)
    assert (await client.post(url, files={"file": ("x.csv", too_big)}, headers=headers)).status_code == 413
    bad_flag = await client.post(
        url, files={"file": ("x.csv", b"a\n1\n"), "skip_invalid": (None, "maybe")}, headers=headers
    )
    assert bad_flag.status_code == 422
    big_row = orjson.dumps({"big": "x" * (64 * 1024)}) + b"\n"
    response = await client.post(url, files={"file": ("x.jsonl", big_row)}, headers=headers)
    assert response.json()["errors"][0]["line"] == 1
    assert "at most 65536" in response.json()["errors"][0]["message"]


async def test_tenancy_and_viewer(
    client: httpx.AsyncClient, org: dict[str, Any], headers: dict[str, str]
) -> None:
    dataset = await make_dataset(client, headers)
    item = (
        await client.post(f"/api/datasets/{dataset['id']}/items", json={"data": {"a": 1}}, headers=headers)
    ).json()["items"][0]
    other = await create_org(client, BOB, name="Other")
    bob = auth(BOB, str(other["id"]))
    assert (await client.get(f"/api/datasets/{dataset['id']}", headers=bob)).status_code == 404
    assert (
        await client.patch(f"/api/datasets/{dataset['id']}", json={"name": "x"}, headers=bob)
    ).status_code == 404
    assert (
        await client.get(f"/api/datasets/{dataset['id']}/items/{item['id']}", headers=bob)
    ).status_code == 404
    assert (
        await client.post(f"/api/datasets/{dataset['id']}/items", json={"data": {}}, headers=bob)
    ).status_code == 404
    assert (await client.get("/api/datasets", headers=bob)).json()["items"] == []

    await client.post(
        f"/api/organizations/{org['id']}/members",
        json={"subject": "carol", "role": "viewer"},
        headers=headers,
    )
    viewer = auth(CAROL, str(org["id"]))
    assert (await client.get(f"/api/datasets/{dataset['id']}/items", headers=viewer)).status_code == 200
    assert (await client.post("/api/datasets", json={"name": "v"}, headers=viewer)).status_code == 403
    assert (
        await client.patch(f"/api/datasets/{dataset['id']}", json={"name": "v"}, headers=viewer)
    ).status_code == 403
    assert (await client.delete(f"/api/datasets/{dataset['id']}", headers=viewer)).status_code == 403
    assert (
        await client.post(
            f"/api/datasets/{dataset['id']}/import", files={"file": ("x.csv", b"a\n1\n")}, headers=viewer
        )
    ).status_code == 403


async def test_deleting_a_dataset_deletes_its_items(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    dataset = await make_dataset(client, headers, tags=["t"])
    await client.post(
        f"/api/datasets/{dataset['id']}/items", json={"items": [{"data": {"a": 1}}]}, headers=headers
    )
    await client.delete(f"/api/datasets/{dataset['id']}", headers=headers)
    again = await make_dataset(client, headers, tags=["t"])  # the name and tag are free again
    assert again["item_count"] == 0
    assert (await client.get(f"/api/datasets/{dataset['id']}/items", headers=headers)).status_code == 404
