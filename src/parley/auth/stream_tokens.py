"""Short-lived stream tokens: a browser or a telephony media stream may open one session's audio.

A WebSocket from a browser cannot set headers and a Twilio media stream cannot carry our API keys,
so the platform hands out a token bound to one organization, one session and one purpose, valid for a
few minutes. It is a JWT signed with a key derived from the platform's secret key (not the login JWT
secret, which may be absent when users come from a JWKS), prefixed ``pst_`` so it is never mistaken
for a login token or an API key.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import jwt

from parley.config import Settings
from parley.kit.errors import Unauthorized

STREAM_TOKEN_PREFIX = "pst_"  # noqa: S105 - a prefix, not a secret
StreamPurpose = Literal["audio", "twilio-media"]
DEFAULT_TTL_SECONDS = 300
_AUDIENCE = "parley:stream"


@dataclass(frozen=True)
class StreamGrant:
    """What a verified stream token allows: one purpose on one session of one organization."""

    organization_id: str
    session_id: str
    purpose: StreamPurpose
    issued_by: str
    expires_at: datetime


def _signing_key(settings: Settings) -> bytes:
    # A derived key: leaking a stream token's key must not reveal the key that encrypts secrets.
    return hmac.new(settings.secret_key_bytes(), b"parley stream tokens v1", hashlib.sha256).digest()


def issue_stream_token(
    settings: Settings,
    *,
    organization_id: str,
    session_id: str,
    issued_by: str,
    purpose: StreamPurpose = "audio",
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
) -> tuple[str, datetime]:
    """A token for ``purpose`` on ``session_id`` and the moment it expires."""
    now = datetime.now(UTC)
    expires_at = now + timedelta(seconds=ttl_seconds)
    claims: dict[str, Any] = {
        "aud": _AUDIENCE,
        "sub": session_id,
        "org": organization_id,
        "pur": purpose,
        "by": issued_by,
        "iat": int(now.timestamp()),
        "exp": int(expires_at.timestamp()),
        "jti": secrets.token_urlsafe(9),
    }
    encoded = jwt.encode(claims, _signing_key(settings), algorithm="HS256")
    return STREAM_TOKEN_PREFIX + encoded, expires_at.replace(microsecond=0)


def is_stream_token(token: str) -> bool:
    return token.startswith(STREAM_TOKEN_PREFIX)


def verify_stream_token(
    settings: Settings, token: str, *, session_id: str | None, purpose: StreamPurpose
) -> StreamGrant:
    """The grant in ``token``; :class:`Unauthorized` when it is forged, expired or for something else.

    ``session_id`` None accepts any session (the Twilio media stream learns it from the token).
    """
    if not is_stream_token(token):
        raise Unauthorized("Not a stream token.")
    try:
        claims = jwt.decode(
            token[len(STREAM_TOKEN_PREFIX) :],
            _signing_key(settings),
            algorithms=["HS256"],
            audience=_AUDIENCE,
            options={"require": ["exp", "sub", "aud"]},
        )
    except jwt.ExpiredSignatureError as exc:
        raise Unauthorized("The stream token has expired; ask for a new one.") from exc
    except jwt.PyJWTError as exc:
        raise Unauthorized("The stream token is not valid.") from exc
    if claims.get("pur") != purpose:
        raise Unauthorized("The stream token was issued for something else.")
    if session_id is not None and claims.get("sub") != session_id:
        raise Unauthorized("The stream token was issued for another session.")
    return StreamGrant(
        organization_id=str(claims["org"]),
        session_id=str(claims["sub"]),
        purpose=purpose,
        issued_by=str(claims.get("by", "")),
        expires_at=datetime.fromtimestamp(int(claims["exp"]), UTC),
    )
