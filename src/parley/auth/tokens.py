"""Verifying bearer JWTs: HS256 with the configured secret, RS256/ES256 with the provider's JWKS.

The algorithm is pinned by the kind of key, never taken from the token: an HS256 token "signed" with
the provider's public key, or ``alg: none``, is rejected. ``exp``, ``iat`` and ``sub`` are required;
``iss`` and ``aud`` are checked when configured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import jwt

from parley.auth.jwks import JWKSCache, pinned_algorithm
from parley.config import Settings
from parley.kit.errors import Unauthorized
from parley.kit.metrics import AUTH_FAILURES

ADMIN_ROLE_CLAIM = "platform_admin"
# An HS256 token verified once is not verified again for this long (nor past its expiry): every request
# of a client carries the same token, and checking its signature is a large share of a cached request.
VERIFIED_FOR_SECONDS = 60.0
MAX_VERIFIED = 10_000


@dataclass(frozen=True)
class Claims:
    subject: str
    email: str | None
    name: str | None
    roles: frozenset[str] = field(default_factory=frozenset)


def _reject(reason: str, message: str) -> Unauthorized:
    AUTH_FAILURES.labels(reason).inc()
    return Unauthorized(message)


class TokenVerifier:
    def __init__(self, settings: Settings) -> None:
        self.secret = settings.jwt_secret_value()
        self.issuer = settings.auth_issuer
        self.audience = settings.auth_audience
        self.leeway = settings.auth_leeway_seconds
        self.max_lifetime = settings.auth_max_token_lifetime_seconds
        self.jwks = (
            JWKSCache(
                settings.auth_jwks_url,
                cache_seconds=settings.auth_jwks_cache_seconds,
                refetch_cooldown=settings.auth_jwks_refetch_cooldown,
            )
            if settings.auth_jwks_url
            else None
        )
        self._verified: dict[str, tuple[float, float, Claims]] = {}

    async def verify(self, token: str) -> Claims:
        """The token's claims; :class:`Unauthorized` with the reason when it does not verify."""
        known = self._verified.get(token)
        if known is not None:
            expires, until, claims = known
            if time.time() < expires and time.monotonic() < until:
                return claims
            del self._verified[token]  # expired: the full check below answers with the reason
        claims, exp, algorithm = await self._verify(token)
        # Only tokens signed with the configured secret are remembered: a provider's token must stop
        # working as soon as its key leaves the provider's JWKS, which only the full check notices.
        if algorithm == "HS256":
            if len(self._verified) >= MAX_VERIFIED:
                self._verified.clear()
            self._verified[token] = (exp + self.leeway, time.monotonic() + VERIFIED_FOR_SECONDS, claims)
        return claims

    async def _verify(self, token: str) -> tuple[Claims, float, str]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise _reject("malformed", "The bearer token is not a well-formed JWT.") from exc
        alg = header.get("alg")
        key: Any
        if alg == "HS256" and self.secret is not None:
            key, algorithm = self.secret, "HS256"
        elif alg in ("RS256", "ES256") and self.jwks is not None:
            kid = header.get("kid")
            jwk = await self.jwks.get_key(kid if isinstance(kid, str) else None)
            algorithm = pinned_algorithm(jwk) or ""
            if algorithm != alg:
                raise _reject("algorithm", f"The token's algorithm {alg} does not match its signing key.")
            key = jwk.key
        else:
            raise _reject("algorithm", f"Tokens signed with {alg!r} are not accepted here.")
        try:
            payload = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                issuer=self.issuer,
                audience=self.audience,
                leeway=self.leeway,
                options={"require": ["exp", "iat", "sub"], "verify_aud": self.audience is not None},
            )
        except jwt.ExpiredSignatureError as exc:
            raise _reject("expired", "The token has expired; obtain a new one.") from exc
        except jwt.ImmatureSignatureError as exc:
            raise _reject(
                "immature", "The token is not valid yet (its iat or nbf lies in the future)."
            ) from exc
        except jwt.InvalidIssuerError as exc:
            raise _reject("issuer", "The token was issued by an issuer this service does not trust.") from exc
        except jwt.InvalidAudienceError as exc:
            raise _reject("audience", "The token is meant for another audience.") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise _reject("claims", f"The token lacks the required claim {exc.claim!r}.") from exc
        except jwt.InvalidSignatureError as exc:
            raise _reject("signature", "The token's signature does not verify.") from exc
        except jwt.PyJWTError as exc:
            raise _reject("invalid", "The bearer token is invalid.") from exc
        self._check_lifetime(payload)
        subject = payload.get("sub")
        if not isinstance(subject, str) or not subject or len(subject) > 255:
            raise _reject("claims", "The token's 'sub' claim must be a non-empty string.")
        roles = payload.get("roles", [])
        if isinstance(roles, str):
            roles = roles.split()
        claims = Claims(
            subject=subject,
            email=_short_str(payload.get("email"), 320),
            name=_short_str(payload.get("name"), 200),
            roles=frozenset(r for r in roles if isinstance(r, str))
            if isinstance(roles, list | tuple)
            else frozenset(),
        )
        return claims, float(payload["exp"]), algorithm

    def _check_lifetime(self, payload: dict[str, Any]) -> None:
        # A stolen token is only as dangerous as it is long-lived: refuse ones minted to live "forever".
        exp = payload.get("exp")
        iat = payload.get("iat")
        start = iat if isinstance(iat, int | float) and not isinstance(iat, bool) else time.time()
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            return  # PyJWT already refused a missing or non-numeric exp
        lifetime = exp - start
        if lifetime > self.max_lifetime:
            raise _reject(
                "lifetime",
                f"The token is valid for {int(lifetime)} s, longer than the {self.max_lifetime} s this "
                "service accepts (PARLEY_AUTH_MAX_TOKEN_LIFETIME_SECONDS); ask for a shorter-lived token.",
            )


def _short_str(value: object, limit: int) -> str | None:
    return value[:limit] if isinstance(value, str) and value else None


def mint_token(
    settings: Settings,
    *,
    subject: str,
    email: str | None = None,
    name: str | None = None,
    admin: bool = False,
    ttl_seconds: int = 12 * 3600,
) -> str:
    """An HS256 token signed with the configured secret, for local use and scripts."""
    secret = settings.jwt_secret_value()
    if secret is None:
        raise ValueError("no HS256 secret is configured (PARLEY_AUTH_JWT_SECRET)")
    now = int(time.time())
    payload: dict[str, Any] = {"sub": subject, "iat": now, "exp": now + ttl_seconds}
    if email:
        payload["email"] = email
    if name:
        payload["name"] = name
    if admin:
        payload["roles"] = [ADMIN_ROLE_CLAIM]
    if settings.auth_issuer:
        payload["iss"] = settings.auth_issuer
    if settings.auth_audience:
        payload["aud"] = settings.auth_audience
    return jwt.encode(payload, secret, algorithm="HS256")
