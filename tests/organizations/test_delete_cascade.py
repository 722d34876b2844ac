"""Deleting an organization removes everything it owns, stored files included, and nothing else."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.config import Settings
from parley.kit.db import Base
from tests.conftest import auth, make_token
from tests.knowledge.helpers import upload_text
from tests.organizations.test_router import ALICE, create_org


async def _fill(client: httpx.AsyncClient, app: Any, headers: dict[str, str]) -> None:
    await upload_text(
        client, app, headers, "Öffnungszeiten", "Wir haben montags bis freitags von 8 bis 18 Uhr geöffnet."
    )
    dataset = (
        await client.post("/api/datasets", json={"name": "calls", "tags": ["qa"]}, headers=headers)
    ).json()
    added = await client.post(
        f"/api/datasets/{dataset['id']}/items", json={"data": {"input": "hi"}}, headers=headers
    )
    assert added.status_code == 200, added.text
    asset = await client.post(
        "/api/assets", files={"file": ("note.txt", b"Hallo Welt, ein Text.")}, headers=headers
    )
    assert asset.status_code == 200, asset.text
    key = await client.post("/api/api-keys", json={"name": "k"}, headers=headers)
    assert key.status_code == 200


async def _owned_rows(session: AsyncSession, organization_id: str) -> dict[str, int]:
    counts = {}
    for table in Base.metadata.sorted_tables:
        if "organization_id" in table.c and table.name != "audit_events":
            counts[table.name] = int(
                await session.scalar(
                    select(func.count()).select_from(table).where(table.c.organization_id == organization_id)
                )
                or 0
            )
    return counts


async def test_delete_removes_every_owned_row_and_file(
    client: httpx.AsyncClient, app: Any, settings: Settings, db_session: AsyncSession
) -> None:
    doomed = await create_org(client, name="Doomed")
    kept = await create_org(client, make_token("keeper"), name="Kept")
    doomed_headers = auth(ALICE, str(doomed["id"]))
    kept_headers = auth(make_token("keeper"), str(kept["id"]))
    await _fill(client, app, doomed_headers)
    await _fill(client, app, kept_headers)
    blob_root = settings.data_dir / "blobs"
    files_before = [p for p in blob_root.rglob("*") if p.is_file()]
    assert len(files_before) == 2  # one asset per organization (text documents keep no original file)

    before = await _owned_rows(db_session, str(doomed["id"]))
    assert before["knowledge_documents"] == 1 and before["knowledge_chunks"] >= 1 and before["assets"] == 1
    deleted = await client.delete(f"/api/organizations/{doomed['id']}", headers=auth(ALICE))
    assert deleted.status_code == 200, deleted.text

    assert set((await _owned_rows(db_session, str(doomed["id"]))).values()) == {0}
    assert sum((await _owned_rows(db_session, str(kept["id"]))).values()) == sum(before.values())
    assert len([p for p in blob_root.rglob("*") if p.is_file()]) == 1
    # The other organization's knowledge still answers searches.
    hits = await client.post("/api/knowledge/search", json={"query": "geöffnet"}, headers=kept_headers)
    assert hits.status_code == 200 and len(hits.json()["results"]) == 1
