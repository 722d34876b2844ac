"""Secrets at rest: AES-256-GCM bound to their row through associated data, and masked hints.

A ciphertext copied onto another row (or another field) fails to decrypt, because the associated
data names the table, the row id and the field.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_VERSION = "v1"


class SecretDecryptionError(Exception):
    """The stored secret cannot be decrypted with this key for this row."""


class SecretBox:
    @staticmethod
    @functools.lru_cache(maxsize=4)
    def for_key(key: bytes) -> SecretBox:
        """One box per key for the whole process (building the cipher is not free)."""
        return SecretBox(key)

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("the secret key must be 32 bytes")
        self._aead = AESGCM(key)

    def encrypt(self, plaintext: str, *, bound_to: str) -> str:
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, plaintext.encode(), bound_to.encode())
        return f"{_VERSION}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def decrypt(self, token: str, *, bound_to: str) -> str:
        version, _, payload = token.partition(":")
        if version != _VERSION:
            raise SecretDecryptionError("unknown secret format")
        try:
            raw = base64.urlsafe_b64decode(payload)
            return self._aead.decrypt(raw[:12], raw[12:], bound_to.encode()).decode()
        except (InvalidTag, ValueError) as exc:
            raise SecretDecryptionError("secret does not decrypt for this row") from exc


class _KeySource(Protocol):
    def secret_key_bytes(self) -> bytes: ...


class _Row(Protocol):
    __tablename__: Any
    id: Any


class RowSecrets:
    """The secrets of one row, each sealed to ``<table>:<row id>:<prefix><field>``.

    The one place that decides how a secret is bound to its row: every domain seals and opens through
    :func:`row_secrets`, so a ciphertext never decrypts on another row, table or field.
    """

    def __init__(self, box: SecretBox, table: str, row_id: str, prefix: str = "") -> None:
        self._box, self._table, self._row_id, self._prefix = box, table, row_id, prefix

    def binding(self, field: str) -> str:
        return f"{self._table}:{self._row_id}:{self._prefix}{field}"

    def seal(self, field: str, value: str) -> str:
        return self._box.encrypt(value, bound_to=self.binding(field))

    def open(self, field: str, token: str) -> str:
        """The plain secret; :class:`SecretDecryptionError` when it no longer decrypts (key changed)."""
        return self._box.decrypt(token, bound_to=self.binding(field))

    def open_or_none(self, field: str, token: str | None) -> str | None:
        if not token:
            return None
        try:
            return self.open(field, token)
        except SecretDecryptionError:
            return None

    def seal_all(self, values: Mapping[str, str]) -> dict[str, str]:
        return {field: self.seal(field, value) for field, value in values.items()}

    def open_all(self, tokens: Mapping[str, str] | None) -> dict[str, str]:
        """Every secret that still decrypts; one that does not (key changed) counts as unset."""
        plain: dict[str, str] = {}
        for field, token in (tokens or {}).items():
            value = self.open_or_none(field, token)
            if value is not None:
                plain[field] = value
        return plain


def row_secrets(keys: _KeySource, row: _Row, *, prefix: str = "") -> RowSecrets:
    """The sealer for ``row``'s secrets under the platform's secret key (``keys`` is the Settings)."""
    return RowSecrets(SecretBox.for_key(keys.secret_key_bytes()), str(row.__tablename__), str(row.id), prefix)


def mask(secret: str, visible: int = 4) -> str:
    """A hint that identifies a secret without revealing it: ``••••abcd``."""
    if len(secret) <= visible * 2:
        return "••••"
    return "••••" + secret[-visible:]


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def constant_time_equals(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
