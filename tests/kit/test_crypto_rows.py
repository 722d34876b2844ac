"""Secrets sealed to their row: the binding format is fixed (stored ciphertexts depend on it)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from parley.kit.crypto import SecretBox, SecretDecryptionError, row_secrets

KEY = bytes(range(32))


class _Keys:
    def secret_key_bytes(self) -> bytes:
        return KEY


@dataclass
class _Row:
    id: str
    __tablename__ = "widgets"


def test_a_secret_opens_only_on_its_own_row_table_and_field() -> None:
    sealed = row_secrets(_Keys(), _Row("w1")).seal("token", "s3cret")
    assert "s3cret" not in sealed
    assert SecretBox(KEY).decrypt(sealed, bound_to="widgets:w1:token") == "s3cret"
    assert row_secrets(_Keys(), _Row("w1")).open("token", sealed) == "s3cret"
    with pytest.raises(SecretDecryptionError):
        row_secrets(_Keys(), _Row("w2")).open("token", sealed)
    with pytest.raises(SecretDecryptionError):
        row_secrets(_Keys(), _Row("w1")).open("other", sealed)
    assert row_secrets(_Keys(), _Row("w1"), prefix="secrets.").open_or_none("token", sealed) is None


def test_open_all_leaves_out_what_no_longer_decrypts() -> None:
    sealer = row_secrets(_Keys(), _Row("w1"), prefix="secrets.")
    tokens = sealer.seal_all({"a": "1", "b": "2"})
    tokens["c"] = row_secrets(_Keys(), _Row("w9")).seal("c", "3")
    assert sealer.open_all(tokens) == {"a": "1", "b": "2"}
    assert sealer.open_all(None) == {}
    assert SecretBox.for_key(KEY) is SecretBox.for_key(KEY)
