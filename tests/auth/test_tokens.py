"""Bearer authentication through the HTTP interface: HS256 JWTs and platform API keys.

Every rejection is a 401 with ``{"detail": <sentence>, "code": "unauthorized"}`` and
``WWW-Authenticate: Bearer``; a user is created (and kept up to date) from the token's claims.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import httpx
import jwt
import pytest
from sqlalchemy import select, update

from parley.auth.models import ApiKey, User
from parley.config import Settings
from parley.kit.db import Database, utcnow
from tests.auth.conftest import (
    IdpKeys,
    assert_forbidden,
    assert_unauthorized,
    claims_now,
    hmac_by_hand,
    unsigned_token,
)
from tests.conftest import JWT_SECRET, auth, make_token

ME = "/api/me"


async def me(client: httpx.AsyncClient, token: str) -> dict[str, Any]:
    response = await client.get(ME, headers=auth(token))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


# --- the Authorization header -----------------------------------------------------------------------


@pytest.mark.parametrize("path", [ME, "/api/organizations", "/api/admin/organizations"])
async def test_missing_authorization_header_is_401(client: httpx.AsyncClient, path: str) -> None:
    assert_unauthorized(await client.get(path), "Authentication required", "Authorization: Bearer")


@pytest.mark.parametrize(
    ("header", "scheme"),
    [("Basic YWxpY2U6c2VjcmV0", "Basic"), ("Digest username=alice", "Digest"), ("Token abc", "Token")],
)
async def test_other_schemes_are_401(client: httpx.AsyncClient, header: str, scheme: str) -> None:
    response = await client.get(ME, headers={"Authorization": header})
    assert_unauthorized(response, "Only the Bearer scheme is accepted", "Bearer")
    assert scheme not in response.json()["detail"]


@pytest.mark.parametrize("header", ["Bearer", "Bearer ", "Bearer     ", "bearer"])
async def test_empty_bearer_token_is_401(client: httpx.AsyncClient, header: str) -> None:
    assert_unauthorized(await client.get(ME, headers={"Authorization": header}), "bearer token is empty")


@pytest.mark.parametrize("template", ["bearer {}", "BEARER {}", "Bearer   {}  "])
async def test_bearer_scheme_is_case_insensitive_and_spaces_are_trimmed(
    client: httpx.AsyncClient, template: str
) -> None:
    response = await client.get(ME, headers={"Authorization": template.format(make_token("alice"))})
    assert response.status_code == 200, response.text
    assert response.json()["subject"] == "alice"


@pytest.mark.parametrize(
    "garbage",
    [
        "not-a-jwt",
        "a.b.c",
        "...",
        "eyJhbGciOiJIUzI1NiJ9",  # a header alone
        unsigned_token({"alg": "HS256"}, {"sub": "x"}).replace(".", "!", 1),
        "W10.e30.",  # header is JSON but an array, not an object
    ],
)
async def test_garbage_token_is_401(client: httpx.AsyncClient, garbage: str) -> None:
    assert_unauthorized(await client.get(ME, headers=auth(garbage)), "not a well-formed JWT")


# --- the algorithm ----------------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["none", "None", "NONE", "nOnE"])
@pytest.mark.parametrize("signature", ["", "c2lnbmF0dXJl"])
async def test_alg_none_token_is_401(client: httpx.AsyncClient, alg: str, signature: str) -> None:
    token = unsigned_token({"alg": alg, "typ": "JWT"}, claims_now("root-admin"), signature)
    assert_unauthorized(await client.get(ME, headers=auth(token)), "not accepted")


async def test_token_without_alg_is_401(client: httpx.AsyncClient) -> None:
    token = unsigned_token({"typ": "JWT"}, claims_now("alice"))
    assert_unauthorized(await client.get(ME, headers=auth(token)), "not accepted")


async def test_hs256_token_with_its_signature_stripped_is_401(client: httpx.AsyncClient) -> None:
    header, payload, _signature = make_token("alice").split(".")
    assert_unauthorized(await client.get(ME, headers=auth(f"{header}.{payload}.")), "signature")


@pytest.mark.parametrize("alg", ["HS384", "HS512"])
async def test_other_hmac_algorithms_are_401_even_with_the_right_secret(
    client: httpx.AsyncClient, alg: str
) -> None:
    token = hmac_by_hand({"alg": alg, "typ": "JWT"}, claims_now("alice"), JWT_SECRET.encode(), alg)
    assert_unauthorized(await client.get(ME, headers=auth(token)), f"{alg!r}", "not accepted")


@pytest.mark.parametrize("which", ["rsa", "ec"])
async def test_rs256_and_es256_tokens_are_401_without_a_jwks_url(
    client: httpx.AsyncClient, idp_keys: IdpKeys, which: str
) -> None:
    key = getattr(idp_keys, which)
    token = key.token("alice")
    assert_unauthorized(await client.get(ME, headers=auth(token)), f"'{key.alg}'", "not accepted")


# --- signature --------------------------------------------------------------------------------------


async def test_wrong_secret_is_401(client: httpx.AsyncClient) -> None:
    token = make_token("alice", secret="another-secret-" + "y" * 40)
    assert_unauthorized(await client.get(ME, headers=auth(token)), "signature does not verify")


async def test_tampered_payload_is_401(client: httpx.AsyncClient) -> None:
    signature = make_token("alice").split(".")[2]
    forged = unsigned_token({"alg": "HS256", "typ": "JWT"}, claims_now("root-admin"), signature)
    assert_unauthorized(await client.get(ME, headers=auth(forged)), "signature does not verify")


async def test_hand_signed_hs256_token_is_accepted(client: httpx.AsyncClient) -> None:
    """The hand-made HMAC helper is right, so the rejections above are about the tokens themselves."""
    token = hmac_by_hand({"alg": "HS256", "typ": "JWT"}, claims_now("hand"), JWT_SECRET.encode())
    assert (await me(client, token))["subject"] == "hand"


# --- time claims ------------------------------------------------------------------------------------


async def test_expired_token_is_401(client: httpx.AsyncClient, settings: Settings) -> None:
    now = int(time.time())
    token = make_token("alice", iat=now - 7200, exp=now - settings.auth_leeway_seconds - 3600)
    assert_unauthorized(await client.get(ME, headers=auth(token)), "expired")


async def test_token_expired_within_the_leeway_is_accepted(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    assert settings.auth_leeway_seconds == 30
    now = int(time.time())
    token = make_token("alice", iat=now - 600, exp=now - 10)
    assert (await me(client, token))["subject"] == "alice"


@pytest.mark.parametrize("ahead", [3600, 30 + 60])
async def test_iat_in_the_future_beyond_the_leeway_is_401(client: httpx.AsyncClient, ahead: int) -> None:
    now = int(time.time())
    token = make_token("alice", iat=now + ahead, exp=now + ahead + 3600)
    assert_unauthorized(await client.get(ME, headers=auth(token)), "not valid yet")


async def test_iat_slightly_in_the_future_within_the_leeway_is_accepted(client: httpx.AsyncClient) -> None:
    now = int(time.time())
    token = make_token("alice", iat=now + 10, exp=now + 3600)
    assert (await me(client, token))["subject"] == "alice"


async def test_nbf_in_the_future_is_401(client: httpx.AsyncClient) -> None:
    now = int(time.time())
    token = make_token("alice", nbf=now + 3600)
    assert_unauthorized(await client.get(ME, headers=auth(token)), "not valid yet")


async def test_nbf_in_the_past_is_accepted(client: httpx.AsyncClient) -> None:
    token = make_token("alice", nbf=int(time.time()) - 60)
    assert (await me(client, token))["subject"] == "alice"


@pytest.mark.parametrize("claim", ["exp", "iat", "nbf"])
async def test_non_numeric_time_claims_are_401(client: httpx.AsyncClient, claim: str) -> None:
    token = make_token("alice", **{claim: "tomorrow"})
    assert_unauthorized(await client.get(ME, headers=auth(token)), "invalid")


# --- required claims --------------------------------------------------------------------------------


@pytest.mark.parametrize("claim", ["sub", "exp", "iat"])
async def test_token_missing_a_required_claim_is_401(client: httpx.AsyncClient, claim: str) -> None:
    token = make_token(**{"sub": "alice", claim: None})
    assert claim not in jwt.decode(token, options={"verify_signature": False})
    assert_unauthorized(await client.get(ME, headers=auth(token)), f"lacks the required claim '{claim}'")


@pytest.mark.parametrize(
    ("sub", "fragment"), [("", "'sub' claim"), ("s" * 256, "'sub' claim"), (42, "invalid")]
)
async def test_unusable_sub_is_401(client: httpx.AsyncClient, sub: Any, fragment: str) -> None:
    token = jwt.encode(claims_now(sub), JWT_SECRET, algorithm="HS256")
    assert_unauthorized(await client.get(ME, headers=auth(token)), fragment)


# --- users from claims ------------------------------------------------------------------------------


async def stored_user(database: Database, subject: str) -> tuple[str, str | None, str | None]:
    async with database.sessionmaker() as session:
        rows = (await session.scalars(select(User).where(User.subject == subject))).all()
    assert len(rows) == 1, rows
    return rows[0].id, rows[0].email, rows[0].name


async def test_user_is_created_on_first_request_and_updated_when_claims_change(
    client: httpx.AsyncClient, database: Database
) -> None:
    first = await me(client, make_token("u-carol", email="carol@example.com", name="Carol"))
    assert first == {
        "kind": "user",
        "id": first["id"],
        "subject": "u-carol",
        "email": "carol@example.com",
        "name": "Carol",
        "is_platform_admin": False,
        "scopes": [],
        "memberships": [],
    }
    assert first["id"].startswith("usr_")
    assert await stored_user(database, "u-carol") == (first["id"], "carol@example.com", "Carol")

    again = await me(client, make_token("u-carol", email="carol@example.com", name="Carol"))
    assert again == first

    changed = await me(client, make_token("u-carol", email="carol@new.example", name="Carol Smith"))
    assert changed["id"] == first["id"]
    assert (changed["email"], changed["name"]) == ("carol@new.example", "Carol Smith")
    assert await stored_user(database, "u-carol") == (first["id"], "carol@new.example", "Carol Smith")

    # A later token without those claims does not erase what is stored.
    assert (await me(client, make_token("u-carol")))["id"] == first["id"]
    assert await stored_user(database, "u-carol") == (first["id"], "carol@new.example", "Carol Smith")


async def test_user_is_updated_when_claims_change_back(client: httpx.AsyncClient, database: Database) -> None:
    old = make_token("u-hana", email="hana@old.example", name="Hana")
    new = make_token("u-hana", email="hana@new.example", name="Hana")
    user_id = (await me(client, old))["id"]  # created
    await me(client, old)  # unchanged
    await me(client, new)  # updated to the new email
    assert await stored_user(database, "u-hana") == (user_id, "hana@new.example", "Hana")

    await me(client, old)  # and back again
    assert await stored_user(database, "u-hana") == (user_id, "hana@old.example", "Hana")


async def test_me_reports_the_stored_profile_for_a_token_without_profile_claims(
    client: httpx.AsyncClient,
) -> None:
    full = await me(client, make_token("u-ivan", email="ivan@example.com", name="Ivan"))
    bare = await me(client, make_token("u-ivan"))
    assert (bare["id"], bare["email"], bare["name"]) == (full["id"], "ivan@example.com", "Ivan")


async def test_distinct_subjects_are_distinct_users(client: httpx.AsyncClient) -> None:
    a = await me(client, make_token("u-dave", email="same@example.com"))
    b = await me(client, make_token("u-erin", email="same@example.com"))
    assert a["id"] != b["id"]


async def test_user_without_email_or_name_claims(client: httpx.AsyncClient) -> None:
    body = await me(client, make_token("u-frank"))
    assert (body["subject"], body["email"], body["name"]) == ("u-frank", None, None)


# --- platform administrators ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sub", "claims", "is_admin"),
    [
        ("u-plain", {}, False),
        ("u-role", {"roles": ["platform_admin"]}, True),
        ("u-role-str", {"roles": "viewer platform_admin"}, True),
        ("root-admin", {}, True),
        ("u-other-role", {"roles": ["admin", "owner"]}, False),
        ("u-role-obj", {"roles": {"platform_admin": True}}, False),
        ("root-admin-2", {}, False),
    ],
)
async def test_platform_admin_from_roles_claim_or_admin_subjects(
    client: httpx.AsyncClient, sub: str, claims: dict[str, Any], is_admin: bool
) -> None:
    token = make_token(sub, **claims)
    assert (await me(client, token))["is_platform_admin"] is is_admin

    response = await client.get("/api/admin/organizations", headers=auth(token))
    if is_admin:
        assert response.status_code == 200, response.text
        assert set(response.json()) == {"items", "next_cursor"}
    else:
        assert_forbidden(response, "platform administrators")


async def test_admin_role_is_read_from_each_token_not_stored(client: httpx.AsyncClient) -> None:
    assert (await me(client, make_token("u-gina", roles=["platform_admin"])))["is_platform_admin"] is True
    assert (await me(client, make_token("u-gina")))["is_platform_admin"] is False
    assert_forbidden(
        await client.get("/api/admin/organizations", headers=auth(make_token("u-gina"))), "administrators"
    )


# --- API keys as bearer tokens ----------------------------------------------------------------------

OWNER = make_token("u-key-owner", email="owner@example.com", name="Key Owner")


async def create_org(client: httpx.AsyncClient, name: str = "X", token: str = OWNER) -> str:
    response = await client.post("/api/organizations", json={"name": name}, headers=auth(token))
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def _random_part(secret: str) -> str:
    return secret.split("_", 2)[2]


async def create_key(
    client: httpx.AsyncClient, org: str, scopes: list[str], *, with_underscore: bool = False, **extra: Any
) -> dict[str, Any]:
    """Create a key whose random part does (or does not) contain ``_``.

    ``token_urlsafe`` secrets contain ``_`` about half of the time; a regression test below makes sure
    such keys work, so both shapes are produced deterministically by retrying.
    """
    for _ in range(60):
        response = await client.post(
            "/api/api-keys", json={"name": "k", "scopes": scopes, **extra}, headers=auth(OWNER, org)
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if ("_" in _random_part(body["secret"])) is with_underscore:
            return body
    raise AssertionError("no key of the wanted shape in 60 attempts")


async def test_api_key_authenticates_as_an_api_key_principal(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    key = await create_key(client, org, ["read"])
    assert key["secret"].startswith("pk_") and key["status"] == "active"

    body = await me(client, key["secret"])
    assert body == {
        "kind": "api_key",
        "id": key["id"],
        "subject": None,
        "email": None,
        "name": "k",
        "is_platform_admin": False,
        "scopes": ["read"],
        "memberships": [{"organization_id": org, "organization_name": "X", "role": "viewer"}],
    }


@pytest.mark.parametrize(
    ("scopes", "role", "allowed"),
    [
        (["read"], "viewer", False),
        (["write"], "member", False),
        (["read", "write"], "member", False),
        (["admin"], "admin", True),
        (["read", "admin"], "admin", True),
    ],
)
async def test_api_key_scopes_map_to_roles_on_admin_routes(
    client: httpx.AsyncClient, scopes: list[str], role: str, allowed: bool
) -> None:
    org = await create_org(client)
    key = await create_key(client, org, scopes)
    assert (await me(client, key["secret"]))["memberships"][0]["role"] == role

    response = await client.get(f"/api/api-keys/{key['id']}", headers=auth(key["secret"]))
    if allowed:
        assert response.status_code == 200, response.text
        assert response.json()["id"] == key["id"] and "secret" not in response.json()
    else:
        assert_forbidden(response, "needs the admin role", f"your role is {role}")


async def test_api_key_is_not_a_platform_admin_nor_a_user(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    key = await create_key(client, org, ["admin"])
    assert_forbidden(
        await client.get("/api/admin/organizations", headers=auth(key["secret"])), "platform administrators"
    )
    response = await client.post("/api/organizations", json={"name": "Y"}, headers=auth(key["secret"]))
    assert_forbidden(response, "user's token")


async def test_revoked_api_key_is_401(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    key = await create_key(client, org, ["read"])
    assert (await me(client, key["secret"]))["id"] == key["id"]

    revoked = await client.post(f"/api/api-keys/{key['id']}/revoke", headers=auth(OWNER, org))
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["status"] == "revoked"

    assert_unauthorized(await client.get(ME, headers=auth(key["secret"])), "revoked")
    # A second key of the organization is unaffected.
    other = await create_key(client, org, ["read"])
    assert (await me(client, other["secret"]))["id"] == other["id"]


async def test_expired_api_key_is_401(client: httpx.AsyncClient, database: Database) -> None:
    org = await create_org(client)
    key = await create_key(client, org, ["read"], expires_in_days=1)
    assert key["expires_at"] is not None
    assert (await me(client, key["secret"]))["id"] == key["id"]

    async with database.sessionmaker() as session:
        await session.execute(
            update(ApiKey).where(ApiKey.id == key["id"]).values(expires_at=utcnow() - timedelta(minutes=1))
        )
        await session.commit()

    assert_unauthorized(await client.get(ME, headers=auth(key["secret"])), "expired")
    listed = await client.get(f"/api/api-keys/{key['id']}", headers=auth(OWNER, org))
    assert listed.status_code == 200 and listed.json()["status"] == "expired"


@pytest.mark.parametrize(
    "token",
    [
        "pk_",
        "pk_short",
        "pk_" + "0" * 26,
        "pk_" + "0" * 25 + "_" + "s" * 40,  # id part one character short
        "pk_" + "0" * 26 + "_" + "s" * 10,  # secret part too short
    ],
)
async def test_malformed_api_key_is_401(client: httpx.AsyncClient, token: str) -> None:
    assert_unauthorized(await client.get(ME, headers=auth(token)), "API key is malformed")


async def test_unknown_or_tampered_api_key_is_401(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    key = await create_key(client, org, ["read"])
    secret: str = key["secret"]
    tampered = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    assert_unauthorized(await client.get(ME, headers=auth(tampered)), "API key is not valid")

    unknown = "pk_" + "0" * 26 + "_" + "s" * 43
    assert_unauthorized(await client.get(ME, headers=auth(unknown)), "API key is not valid")


async def test_api_key_whose_secret_contains_an_underscore_authenticates(client: httpx.AsyncClient) -> None:
    org = await create_org(client)
    key = await create_key(client, org, ["read"], with_underscore=True)
    response = await client.get(ME, headers=auth(key["secret"]))
    assert response.status_code == 200, response.text
    assert response.json()["id"] == key["id"]


async def test_token_sent_without_a_scheme_is_401_and_not_echoed(client: httpx.AsyncClient) -> None:
    token = make_token("alice")
    response = await client.get(ME, headers={"Authorization": token})
    assert_unauthorized(response, "Authorization: Bearer")
    assert token not in response.text
