"""Assets on S3-compatible storage (moto's server on loopback) behave as on the local disk."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer
from pydantic import SecretStr

from parley.config import Settings
from tests.assets import files
from tests.conftest import auth
from tests.live import free_port
from tests.organizations.test_router import ALICE, create_org


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing-secret",
    ).create_bucket(Bucket="parley-assets")
    try:
        yield endpoint
    finally:
        server.stop()


@pytest.fixture
def settings(settings: Settings, moto_endpoint: str) -> Settings:
    settings.blob_url = "s3://parley-assets/platform"
    settings.s3_endpoint_url = moto_endpoint
    settings.s3_region = "us-east-1"
    settings.s3_access_key_id = "testing"
    settings.s3_secret_access_key = SecretStr("testing-secret")
    return settings


async def test_upload_download_range_delete_on_s3(client: httpx.AsyncClient, moto_endpoint: str) -> None:
    org = await create_org(client)
    headers = auth(ALICE, str(org["id"]))
    data = files.wav_bytes(20_000)
    response = await client.post("/api/assets", files={"file": ("a.wav", data)}, headers=headers)
    assert response.status_code == 200, response.text
    asset = response.json()

    s3 = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing-secret",
    )
    key = f"platform/{org['id']}/assets/{asset['id']}"
    assert s3.head_object(Bucket="parley-assets", Key=key)["ContentType"] == "audio/wav"

    content = await client.get(asset["url"], headers=headers)
    assert content.content == data
    ranged = await client.get(asset["url"], headers={**headers, "Range": "bytes=100-199"})
    assert ranged.status_code == 206 and ranged.content == data[100:200]

    assert (await client.delete(f"/api/assets/{asset['id']}", headers=headers)).status_code == 200
    listed = s3.list_objects_v2(Bucket="parley-assets", Prefix=key)
    assert listed.get("KeyCount", 0) == 0
