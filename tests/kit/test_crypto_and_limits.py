from __future__ import annotations

import os

import pytest

from parley.kit.crypto import SecretBox, SecretDecryptionError, mask
from parley.kit.pagination import decode_cursor, encode_cursor
from parley.kit.ratelimit import SlidingWindowLimiter


def test_secret_box_binds_ciphertext_to_its_row() -> None:
    box = SecretBox(os.urandom(32))
    sealed = box.encrypt("sk-live-123456", bound_to="providers:prov_1:api_key")
    assert "sk-live" not in sealed
    assert box.decrypt(sealed, bound_to="providers:prov_1:api_key") == "sk-live-123456"
    with pytest.raises(SecretDecryptionError):
        box.decrypt(sealed, bound_to="providers:prov_2:api_key")
    with pytest.raises(SecretDecryptionError):
        SecretBox(os.urandom(32)).decrypt(sealed, bound_to="providers:prov_1:api_key")
    tampered = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    with pytest.raises(SecretDecryptionError):
        box.decrypt(tampered, bound_to="providers:prov_1:api_key")


def test_mask_reveals_only_a_hint() -> None:
    assert mask("sk-live-abcdefgh1234") == "••••1234"
    assert mask("short") == "••••"


def test_cursor_round_trip_and_rejects_garbage() -> None:
    assert decode_cursor(encode_cursor("key_01ABC")) == "key_01ABC"
    from parley.kit.errors import BadRequest

    for bad in ("%%%", "aGVsbG8", ""):
        with pytest.raises(BadRequest):
            decode_cursor(bad)


def test_sliding_window_limits_and_recovers() -> None:
    limiter = SlidingWindowLimiter(limit=3, window_seconds=60)
    decisions = [limiter.hit("k", now=10.0) for _ in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert 1 <= decisions[-1].retry_after <= 60
    assert limiter.hit("other", now=10.0).allowed
    # Two windows later the old hits no longer count.
    assert limiter.hit("k", now=130.0).allowed


def test_zero_limit_disables() -> None:
    limiter = SlidingWindowLimiter(limit=0)
    assert all(limiter.hit("k").allowed for _ in range(1000))


def test_body_limit_per_path_prefix() -> None:
    from parley.kit.middleware import BodySizeLimitMiddleware

    async def app(scope: object, receive: object, send: object) -> None:  # pragma: no cover - never called
        return None

    middleware = BodySizeLimitMiddleware(app, 100, per_path={"/api/assets": 1000, "/api/assets/big": 5000})
    assert middleware.limit_for("/api/organizations") == 100
    assert middleware.limit_for("/api/assets") == 1000
    assert middleware.limit_for("/api/assets/big/x") == 5000
