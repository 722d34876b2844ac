"""Blob stores: the local directory and S3 (against moto's server on loopback) behave the same."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from parley.config import ConfigError, Settings
from parley.kit.blobs import (
    BlobNotFound,
    BlobStore,
    InvalidBlobKey,
    LocalBlobStore,
    S3BlobStore,
    blob_store_from_settings,
    validate_key,
)
from tests.live import free_port

S3_CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing-secret"}


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def make_bucket(endpoint: str, name: str) -> None:
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing-secret",
    )
    client.create_bucket(Bucket=name)


@pytest.fixture(params=["local", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    if request.param == "local":
        yield LocalBlobStore(tmp_path / "blobs")
        return
    endpoint = request.getfixturevalue("moto_endpoint")
    bucket = f"parley-{request.node.name.split('[')[0].replace('_', '-')[-40:]}"
    make_bucket(endpoint, bucket)
    yield S3BlobStore(bucket, "tenant/blobs", endpoint_url=endpoint, region="us-east-1", **S3_CREDENTIALS)


async def collect(iterator: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in iterator])


async def test_put_get_size_exists_delete(store: BlobStore) -> None:
    assert isinstance(store, BlobStore)
    key = "org_1/assets/ast_1"
    assert not await store.exists(key)
    await store.put(key, b"hello world", "text/plain")
    assert await store.exists(key)
    assert await store.get(key) == b"hello world"
    assert await store.size(key) == 11
    await store.put(key, b"replaced", "text/plain")
    assert await store.get(key) == b"replaced"
    await store.delete(key)
    assert not await store.exists(key)
    await store.delete(key)  # idempotent


async def test_missing_blob_raises(store: BlobStore) -> None:
    with pytest.raises(BlobNotFound):
        await store.get("org_1/nothing")
    with pytest.raises(BlobNotFound):
        await store.size("org_1/nothing")
    with pytest.raises(BlobNotFound):
        await collect(store.stream("org_1/nothing"))


async def test_stream_whole_and_ranges(store: BlobStore) -> None:
    data = bytes(range(256)) * 1024  # 256 KiB: several chunks
    await store.put("org_1/big.bin", data, "application/octet-stream")
    assert await collect(store.stream("org_1/big.bin")) == data
    assert await collect(store.stream("org_1/big.bin", 10, 19)) == data[10:20]
    assert await collect(store.stream("org_1/big.bin", 100_000)) == data[100_000:]
    assert await collect(store.stream("org_1/big.bin", 0, 0)) == data[:1]
    assert await collect(store.stream("org_1/big.bin", len(data) - 5, len(data) + 50)) == data[-5:]
    assert await collect(store.stream("org_1/big.bin", len(data) + 10)) == b""


@pytest.mark.parametrize(
    "key",
    ["", "../escape", "a/../../b", "/etc/passwd", "a//b", "a/./b", "a b", "ünï", "a\\b", "dir/", "x" * 901],
)
async def test_unsafe_keys_are_refused(store: BlobStore, key: str) -> None:
    with pytest.raises(InvalidBlobKey):
        await store.put(key, b"x", "text/plain")
    with pytest.raises(InvalidBlobKey):
        await store.get(key)


def test_validate_key_accepts_nested_keys() -> None:
    assert validate_key("org_01J/assets/ast_01J.v1-final") == "org_01J/assets/ast_01J.v1-final"


async def test_local_store_writes_atomically_under_root(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "root")
    await store.put("a/b/c.txt", b"data", "text/plain")
    assert (tmp_path / "root" / "a" / "b" / "c.txt").read_bytes() == b"data"
    # No temporary files left behind.
    assert sorted(p.name for p in (tmp_path / "root" / "a" / "b").iterdir()) == ["c.txt"]


async def test_local_store_refuses_symlink_escape(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(outside)
    store = LocalBlobStore(root)
    with pytest.raises(InvalidBlobKey):
        await store.get("link/secret")


async def test_s3_store_uses_prefix(moto_endpoint: str) -> None:
    make_bucket(moto_endpoint, "prefixed")
    store = S3BlobStore("prefixed", "/p/q/", endpoint_url=moto_endpoint, region="us-east-1", **S3_CREDENTIALS)
    await store.put("k1", b"v", "text/plain")
    client = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing-secret",
    )
    head = client.head_object(Bucket="prefixed", Key="p/q/k1")
    assert head["ContentType"] == "text/plain"


def test_store_from_settings(tmp_path: Path, moto_endpoint: str) -> None:
    default = blob_store_from_settings(Settings(data_dir=tmp_path))
    assert isinstance(default, LocalBlobStore)
    assert default.root == (tmp_path / "blobs").resolve()

    local = blob_store_from_settings(Settings(data_dir=tmp_path, blob_url=f"file://{tmp_path}/other"))
    assert isinstance(local, LocalBlobStore)
    assert local.root == (tmp_path / "other").resolve()

    s3 = blob_store_from_settings(
        Settings(
            data_dir=tmp_path,
            blob_url="s3://bucket/some/prefix",
            s3_endpoint_url=moto_endpoint,
            s3_region="us-east-1",
            s3_access_key_id="testing",
            s3_secret_access_key="testing-secret",  # type: ignore[arg-type]
        )
    )
    assert isinstance(s3, S3BlobStore)
    assert (s3.bucket, s3.prefix) == ("bucket", "some/prefix")

    for bad in ("ftp://host/x", "s3://", "file://remote-host/x", "s3://bucket/../x"):
        with pytest.raises(ConfigError):
            blob_store_from_settings(Settings(data_dir=tmp_path, blob_url=bad))
