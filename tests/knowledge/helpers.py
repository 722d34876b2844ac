"""Helpers for tests that need knowledge documents (also usable by other domains' tests)."""

from __future__ import annotations

from typing import Any

import httpx

from parley.kit.jobs import runner_for

READY_ATTEMPTS = 20


async def wait_for_document(client: httpx.AsyncClient, app: Any, headers: dict[str, str], doc_id: str) -> Any:
    """Let the background jobs run, then poll the document until it is no longer pending (bounded).

    Tests share one database connection, so always call this before the next request after an upload.
    """
    for _ in range(READY_ATTEMPTS):
        await runner_for(app.state).drain()
        response = await client.get(f"/api/knowledge/documents/{doc_id}", headers=headers)
        assert response.status_code == 200, response.text
        if response.json()["status"] != "pending":
            return response.json()
    raise AssertionError(f"document {doc_id} is still pending after {READY_ATTEMPTS} checks")


async def upload_text(
    client: httpx.AsyncClient, app: Any, headers: dict[str, str], title: str, text: str
) -> Any:
    response = await client.post(
        "/api/knowledge/documents", json={"title": title, "text": text}, headers=headers
    )
    assert response.status_code == 200, response.text
    return await wait_for_document(client, app, headers, response.json()["id"])


async def upload_file(
    client: httpx.AsyncClient,
    app: Any,
    headers: dict[str, str],
    filename: str,
    data: bytes,
    *,
    title: str | None = None,
) -> Any:
    fields = {"title": (None, title)} if title else {}
    response = await client.post(
        "/api/knowledge/documents", files={"file": (filename, data), **fields}, headers=headers
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "pending"
    return await wait_for_document(client, app, headers, response.json()["id"])
