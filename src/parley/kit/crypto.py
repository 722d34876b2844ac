"""Secrets at rest: AES-256-GCM bound to their row through associated data, and masked hints.

A ciphertext copied onto another row (or another field) fails to decrypt, because the associated
data names the table, the row id and the field.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_VERSION = "v1"


class SecretDecryptionError(Exception):
    """The stored secret cannot be decrypted with this key for this row."""


class SecretBox:
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


def mask(secret: str, visible: int = 4) -> str:
    """A hint that identifies a secret without revealing it: ``••••abcd``."""
    if len(secret) <= visible * 2:
        return "••••"
    return "••••" + secret[-visible:]


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def constant_time_equals(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
