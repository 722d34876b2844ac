"""Blob storage: one interface, a local directory or S3-compatible object storage behind it.

Keys are relative paths made of ``[A-Za-z0-9._/-]`` (no ``..``, no leading ``/``, no empty segment),
for example ``org_01J.../assets/ast_01J...``. Both stores validate them the same way, so a key that
works locally works on S3 and vice versa. Byte ranges follow HTTP's ``Range`` header: ``start`` and
``end`` are inclusive offsets.

``blob_store_from_settings`` picks the store from ``PARLEY_BLOB_URL``: empty or ``file:///path`` is a
local directory (default ``<data_dir>/blobs``), ``s3://bucket/prefix`` is S3 with the endpoint, region
and credentials from ``PARLEY_S3_*``. Blocking I/O (files, boto3) always runs in a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from parley.config import Settings

CHUNK_SIZE = 64 * 1024
MAX_KEY_LENGTH = 900
_KEY_RE = re.compile(r"[A-Za-z0-9._/-]+")


class BlobNotFound(Exception):
    """No blob is stored under this key."""


class InvalidBlobKey(ValueError):
    """The key is not a safe relative path."""


class BlobStoreError(Exception):
    """The storage backend failed (disk error, object store unreachable)."""


def validate_key(key: str) -> str:
    """Return ``key`` when it is a safe relative key, else raise :class:`InvalidBlobKey`."""
    if not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidBlobKey(f"blob keys must be 1 to {MAX_KEY_LENGTH} characters long")
    if not _KEY_RE.fullmatch(key):
        raise InvalidBlobKey("blob keys may only contain letters, digits, '.', '_', '/' and '-'")
    if key.startswith("/") or key.endswith("/") or "//" in key:
        raise InvalidBlobKey("blob keys are relative paths without empty segments")
    if ".." in key or any(part == "." for part in key.split("/")):
        raise InvalidBlobKey("blob keys may not contain '..' or '.' segments")
    return key


def _check_range(start: int | None, end: int | None) -> tuple[int, int | None]:
    first = start or 0
    if first < 0 or (end is not None and end < first):
        raise ValueError("a byte range needs 0 <= start <= end")
    return first, end


@runtime_checkable
class BlobStore(Protocol):
    async def put(self, key: str, data: bytes, content_type: str) -> None:
        """Store ``data`` under ``key``, replacing any previous blob atomically."""

    async def get(self, key: str) -> bytes:
        """The whole blob; raises :class:`BlobNotFound`."""

    async def delete(self, key: str) -> None:
        """Remove the blob; removing a missing blob is not an error."""

    async def exists(self, key: str) -> bool: ...

    async def size(self, key: str) -> int:
        """The blob's size in bytes; raises :class:`BlobNotFound`."""

    def stream(self, key: str, start: int | None = None, end: int | None = None) -> AsyncIterator[bytes]:
        """The blob's bytes ``start..end`` (inclusive) in chunks; raises :class:`BlobNotFound`."""


class LocalBlobStore:
    """Blobs as files under ``root``; writes go to a temporary file that replaces the target."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()

    def __repr__(self) -> str:
        return f"LocalBlobStore({str(self.root)!r})"

    def path_for(self, key: str) -> Path:
        path = (self.root / validate_key(key)).resolve()
        if not path.is_relative_to(self.root) or path == self.root:
            raise InvalidBlobKey("the blob key leaves the storage directory")
        return path

    def _write(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    async def put(self, key: str, data: bytes, content_type: str) -> None:
        path = self.path_for(key)
        try:
            await anyio.to_thread.run_sync(self._write, path, data)
        except OSError as exc:
            raise BlobStoreError(f"the blob could not be written ({exc.strerror})") from exc

    async def get(self, key: str) -> bytes:
        path = self.path_for(key)
        try:
            return await anyio.to_thread.run_sync(path.read_bytes)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise BlobNotFound(key) from exc

    async def delete(self, key: str) -> None:
        path = self.path_for(key)
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            await anyio.to_thread.run_sync(path.unlink)

    async def exists(self, key: str) -> bool:
        path = self.path_for(key)
        return await anyio.to_thread.run_sync(path.is_file)

    async def size(self, key: str) -> int:
        path = self.path_for(key)
        try:
            stat = await anyio.to_thread.run_sync(path.stat)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise BlobNotFound(key) from exc
        return stat.st_size

    async def stream(
        self, key: str, start: int | None = None, end: int | None = None
    ) -> AsyncIterator[bytes]:
        path = self.path_for(key)
        first, last = _check_range(start, end)
        try:
            handle: BinaryIO = await anyio.to_thread.run_sync(path.open, "rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise BlobNotFound(key) from exc
        try:
            await anyio.to_thread.run_sync(handle.seek, first)
            remaining = None if last is None else last - first + 1
            while remaining is None or remaining > 0:
                want = CHUNK_SIZE if remaining is None else min(CHUNK_SIZE, remaining)
                chunk = await anyio.to_thread.run_sync(handle.read, want)
                if not chunk:
                    break
                if remaining is not None:
                    remaining -= len(chunk)
                yield chunk
        finally:
            await anyio.to_thread.run_sync(handle.close)


class S3BlobStore:
    """Blobs as objects in an S3-compatible bucket (AWS, MinIO, moto...), through boto3 in threads."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        client: Any = None,
    ) -> None:
        import boto3
        from botocore.config import Config

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            validate_key(self.prefix)
        self._client = client or boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint_url or None,
            region_name=region or None,
            aws_access_key_id=access_key_id or None,
            aws_secret_access_key=secret_access_key or None,
            config=Config(
                retries={"max_attempts": 3, "mode": "standard"},
                connect_timeout=5,
                read_timeout=30,
                max_pool_connections=32,
            ),
        )

    def __repr__(self) -> str:
        return f"S3BlobStore(bucket={self.bucket!r}, prefix={self.prefix!r})"

    def object_key(self, key: str) -> str:
        validate_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    @staticmethod
    def _is_missing(exc: Exception) -> bool:
        from botocore.exceptions import ClientError

        if not isinstance(exc, ClientError):
            return False
        code = str(exc.response.get("Error", {}).get("Code", ""))
        return code in {"404", "NoSuchKey", "NotFound"}

    async def _call(self, key: str, method: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        def call() -> Any:
            return getattr(self._client, method)(Bucket=self.bucket, **kwargs)

        try:
            return await anyio.to_thread.run_sync(call)
        except ClientError as exc:
            if self._is_missing(exc):
                raise BlobNotFound(key) from exc
            code = exc.response.get("Error", {}).get("Code", "unknown")
            raise BlobStoreError(f"the object store refused {method} ({code})") from exc
        except BotoCoreError as exc:
            raise BlobStoreError(f"the object store failed ({type(exc).__name__})") from exc

    async def put(self, key: str, data: bytes, content_type: str) -> None:
        await self._call(
            key,
            "put_object",
            Key=self.object_key(key),
            Body=data,
            ContentType=content_type or "application/octet-stream",
        )

    async def get(self, key: str) -> bytes:
        response = await self._call(key, "get_object", Key=self.object_key(key))
        body = response["Body"]
        try:
            data: bytes = await anyio.to_thread.run_sync(body.read)
        finally:
            body.close()
        return data

    async def delete(self, key: str) -> None:
        with contextlib.suppress(BlobNotFound):
            await self._call(key, "delete_object", Key=self.object_key(key))

    async def exists(self, key: str) -> bool:
        try:
            await self._call(key, "head_object", Key=self.object_key(key))
        except BlobNotFound:
            return False
        return True

    async def size(self, key: str) -> int:
        response = await self._call(key, "head_object", Key=self.object_key(key))
        return int(response["ContentLength"])

    async def stream(
        self, key: str, start: int | None = None, end: int | None = None
    ) -> AsyncIterator[bytes]:
        first, last = _check_range(start, end)
        kwargs: dict[str, Any] = {"Key": self.object_key(key)}
        if first or last is not None:
            kwargs["Range"] = f"bytes={first}-{'' if last is None else last}"
        try:
            response = await self._call(key, "get_object", **kwargs)
        except BlobStoreError as exc:
            if "InvalidRange" in str(exc):  # a range starting at or past the end is empty
                return
            raise
        body = response["Body"]
        try:
            while True:
                chunk: bytes = await anyio.to_thread.run_sync(body.read, CHUNK_SIZE)
                if not chunk:
                    break
                yield chunk
        finally:
            body.close()


def blob_store_from_settings(settings: Settings) -> BlobStore:
    """The store named by ``PARLEY_BLOB_URL`` (local ``<data_dir>/blobs`` by default)."""
    from parley.config import ConfigError

    url = (settings.blob_url or "").strip()
    if not url:
        return LocalBlobStore(settings.data_dir / "blobs")
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path:
            raise ConfigError("PARLEY_BLOB_URL file URLs look like file:///absolute/path.")
        return LocalBlobStore(unquote(parsed.path))
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigError("PARLEY_BLOB_URL s3 URLs look like s3://bucket/optional/prefix.")
        secret = settings.s3_secret_access_key
        try:
            return S3BlobStore(
                parsed.netloc,
                parsed.path.strip("/"),
                endpoint_url=settings.s3_endpoint_url,
                region=settings.s3_region,
                access_key_id=settings.s3_access_key_id,
                secret_access_key=secret.get_secret_value() if secret else None,
            )
        except InvalidBlobKey as exc:
            raise ConfigError(f"PARLEY_BLOB_URL has an invalid prefix: {exc}.") from exc
    raise ConfigError("PARLEY_BLOB_URL must be empty, file:///path or s3://bucket/prefix.")
