"""Bearer JWTs signed by an external identity provider, verified with its JWKS over real HTTP.

A threaded HTTP server on 127.0.0.1 serves the provider's keys (RSA 2048 and EC P-256); tests change
the document and its availability and count the fetches.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog.testing
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from jwt.algorithms import ECAlgorithm, OKPAlgorithm

from tests.auth.conftest import (
    AUDIENCE,
    ISSUER,
    IdpClientFactory,
    IdpKeys,
    JwksServer,
    assert_error,
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


def assert_keys_unavailable(response: httpx.Response) -> None:
    assert_error(response, 503, "service_unavailable", "identity provider", "try again")
    assert "www-authenticate" not in response.headers  # not a credentials problem
    assert int(response.headers["retry-after"]) >= 1


# --- accepted tokens --------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["rsa", "ec"])
async def test_rs256_and_es256_tokens_are_accepted(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer, which: str
) -> None:
    client = await idp_client()
    key = getattr(idp_keys, which)
    body = await me(client, key.token(f"idp-{which}", email=f"{which}@idp.test", name="From IdP"))
    assert (body["kind"], body["subject"], body["email"], body["name"]) == (
        "user",
        f"idp-{which}",
        f"{which}@idp.test",
        "From IdP",
    )
    assert body["is_platform_admin"] is False
    # The keys are cached: more requests, with either key, do not fetch again.
    await me(client, idp_keys.rsa.token())
    await me(client, idp_keys.ec.token())
    assert jwks_server.hits == 1


async def test_idp_roles_claim_makes_a_platform_admin(
    idp_client: IdpClientFactory, idp_keys: IdpKeys
) -> None:
    client = await idp_client()
    token = idp_keys.ec.token("idp-boss", roles=["platform_admin"])
    assert (await me(client, token))["is_platform_admin"] is True
    assert (await client.get("/api/admin/organizations", headers=auth(token))).status_code == 200


async def test_audience_list_containing_ours_is_accepted(
    idp_client: IdpClientFactory, idp_keys: IdpKeys
) -> None:
    client = await idp_client()
    await me(client, idp_keys.rsa.token(aud=["other-service", AUDIENCE]))


async def test_token_without_kid_uses_the_only_published_key(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer
) -> None:
    jwks_server.publish(idp_keys.rsa.jwk())
    client = await idp_client()
    assert (await me(client, idp_keys.rsa.token("no-kid", kid=None)))["subject"] == "no-kid"


async def test_token_without_kid_is_401_when_several_keys_are_published(
    idp_client: IdpClientFactory, idp_keys: IdpKeys
) -> None:
    client = await idp_client()
    response = await client.get(ME, headers=auth(idp_keys.rsa.token(kid=None)))
    assert_unauthorized(response, "key the identity provider does not publish")


async def test_unusable_keys_in_the_document_do_not_hide_the_usable_ones(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer
) -> None:
    p384: dict[str, Any] = ECAlgorithm.to_jwk(
        ec.generate_private_key(ec.SECP384R1()).public_key(), as_dict=True
    )
    okp: dict[str, Any] = OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate().public_key(), as_dict=True)
    jwks_server.publish(
        {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
        {**p384, "kid": "p384"},
        {**okp, "kid": "ed25519"},
        {"kty": "RSA", "kid": "broken", "n": "AA", "e": "AQAB"},
        idp_keys.rsa.jwk(kid="rsa-enc", use="enc"),
        idp_keys.rsa.jwk(),
        idp_keys.ec.jwk(),
    )
    client = await idp_client()
    await me(client, idp_keys.rsa.token())
    await me(client, idp_keys.ec.token())
    # An encryption key is not a signing key, even when the signature would verify with it.
    response = await client.get(ME, headers=auth(idp_keys.rsa.token(kid="rsa-enc")))
    assert_unauthorized(response, "does not publish")


# --- issuer and audience ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claims", "fragment"),
    [
        ({"iss": "https://evil.test/"}, "issuer this service does not trust"),
        ({"iss": "https://idp.test"}, "issuer this service does not trust"),  # no trailing slash
        ({"iss": None}, "lacks the required claim 'iss'"),
        ({"aud": "someone-else"}, "meant for another audience"),
        ({"aud": ["a", "b"]}, "meant for another audience"),
        ({"aud": None}, "lacks the required claim 'aud'"),
    ],
)
async def test_wrong_or_missing_issuer_or_audience_is_401(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, claims: dict[str, Any], fragment: str
) -> None:
    client = await idp_client()
    assert_unauthorized(await client.get(ME, headers=auth(idp_keys.rsa.token(**claims))), fragment)


async def test_expired_idp_token_is_401(idp_client: IdpClientFactory, idp_keys: IdpKeys) -> None:
    client = await idp_client()
    assert_unauthorized(await client.get(ME, headers=auth(idp_keys.ec.token(ttl=-3600))), "expired")


# --- forged and confused tokens ---------------------------------------------------------------------


async def test_hs256_token_signed_with_the_providers_public_key_is_401(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, tmp_path: Path
) -> None:
    client = await idp_client()
    pem = idp_keys.rsa.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    payload = claims_now("root-admin", iss=ISSUER, aud=AUDIENCE)
    for secret in (pem, pem.strip()):
        token = hmac_by_hand({"alg": "HS256", "typ": "JWT", "kid": idp_keys.rsa.kid}, payload, secret)
        assert_unauthorized(await client.get(ME, headers=auth(token)), "'HS256'", "not accepted")
    # With a JWKS URL and no secret, no HS256 secret was generated behind the scenes either.
    assert not (tmp_path / "idp-0" / "jwt_secret").exists()


async def test_hs256_confusion_is_401_also_when_a_secret_is_configured_too(
    idp_client: IdpClientFactory, idp_keys: IdpKeys
) -> None:
    client = await idp_client(auth_jwt_secret=JWT_SECRET)
    pem = idp_keys.rsa.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    payload = claims_now("root-admin", iss=ISSUER, aud=AUDIENCE)
    token = hmac_by_hand({"alg": "HS256", "typ": "JWT", "kid": idp_keys.rsa.kid}, payload, pem)
    assert_unauthorized(await client.get(ME, headers=auth(token)), "signature does not verify")
    # Both kinds of token are accepted side by side.
    await me(client, make_token("local-user", iss=ISSUER, aud=AUDIENCE))
    await me(client, idp_keys.rsa.token())


async def test_local_hs256_tokens_are_401_when_only_jwks_is_configured(idp_client: IdpClientFactory) -> None:
    client = await idp_client()
    token = make_token("alice", iss=ISSUER, aud=AUDIENCE)
    assert_unauthorized(await client.get(ME, headers=auth(token)), "'HS256'", "not accepted")


@pytest.mark.parametrize("kid", ["rsa-1", "ec-1"])
async def test_alg_none_is_401_with_jwks(idp_client: IdpClientFactory, kid: str) -> None:
    client = await idp_client()
    token = unsigned_token({"alg": "none", "kid": kid}, claims_now(iss=ISSUER, aud=AUDIENCE))
    assert_unauthorized(await client.get(ME, headers=auth(token)), "not accepted")


async def test_rs256_token_claiming_the_ec_keys_kid_is_401(
    idp_client: IdpClientFactory, idp_keys: IdpKeys
) -> None:
    client = await idp_client()
    token = idp_keys.rsa.token(kid=idp_keys.ec.kid)
    assert_unauthorized(await client.get(ME, headers=auth(token)), "RS256 does not match its signing key")


async def test_es256_token_claiming_the_rsa_keys_kid_is_401(
    idp_client: IdpClientFactory, idp_keys: IdpKeys
) -> None:
    client = await idp_client()
    token = idp_keys.ec.token(kid=idp_keys.rsa.kid)
    assert_unauthorized(await client.get(ME, headers=auth(token)), "ES256 does not match its signing key")


async def test_token_signed_by_another_rsa_key_with_a_known_kid_is_401(
    idp_client: IdpClientFactory, idp_keys: IdpKeys
) -> None:
    client = await idp_client()
    assert idp_keys.foreign_rsa.kid == idp_keys.rsa.kid
    token = idp_keys.foreign_rsa.token("root-admin")
    assert_unauthorized(await client.get(ME, headers=auth(token)), "signature does not verify")


# --- unknown kids, refetch cooldown and key rotation ------------------------------------------------


async def test_flood_of_unknown_kids_within_the_cooldown_does_not_refetch(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer
) -> None:
    client = await idp_client(cooldown=3600)
    await me(client, idp_keys.rsa.token())
    assert jwks_server.hits == 1
    for i in range(5):
        response = await client.get(ME, headers=auth(idp_keys.rsa.token(kid=f"forged-{i}")))
        assert_unauthorized(response, "key the identity provider does not publish")
    assert jwks_server.hits == 1
    await me(client, idp_keys.ec.token())
    assert jwks_server.hits == 1


async def test_first_request_with_an_unknown_kid_fetches_then_the_cooldown_holds(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer
) -> None:
    client = await idp_client(cooldown=3600)
    for i in range(5):
        response = await client.get(ME, headers=auth(idp_keys.rsa.token(kid=f"forged-{i}")))
        assert_unauthorized(response, "does not publish")
    assert jwks_server.hits == 1
    await me(client, idp_keys.rsa.token())
    assert jwks_server.hits == 1


async def test_concurrent_requests_during_the_first_fetch_wait_for_it(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer
) -> None:
    jwks_server.delay = 0.3  # a slow provider: the other requests surely arrive during the fetch
    client = await idp_client(cooldown=3600)
    forged = [idp_keys.rsa.token(kid=f"forged-{i}") for i in range(5)]
    # Unknown kids, so that the requests stop before the (single, shared) test database connection.
    responses = await asyncio.gather(*(client.get(ME, headers=auth(t)) for t in forged))
    assert [r.status_code for r in responses] == [401] * 5, [r.text for r in responses]
    for response in responses:
        assert_unauthorized(response, "does not publish")
    assert jwks_server.hits == 1


async def test_unknown_kid_after_the_cooldown_triggers_exactly_one_refetch(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer
) -> None:
    cooldown = 2.0  # long enough that five quick requests fit inside it even on a busy machine
    client = await idp_client(cooldown=cooldown)
    await me(client, idp_keys.rsa.token())
    assert jwks_server.hits == 1
    await asyncio.sleep(cooldown + 0.1)  # the cooldown since the first fetch has certainly passed

    for i in range(5):
        response = await client.get(ME, headers=auth(idp_keys.rsa.token(kid=f"forged-{i}")))
        assert_unauthorized(response, "does not publish")
    assert jwks_server.hits == 2


async def test_rotated_key_is_picked_up_on_the_next_request(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer
) -> None:
    client = await idp_client(cooldown=0)
    old, new = idp_keys.rsa, idp_keys.rsa_next
    await me(client, old.token())
    assert jwks_server.hits == 1

    jwks_server.publish(new.jwk())  # the provider rotates: new kid in, old kid out
    await me(client, new.token("after-rotation"))
    assert jwks_server.hits == 2
    await me(client, new.token())
    assert jwks_server.hits == 2  # known kid, fresh cache: no fetch

    # The retired key went with the new document: its tokens are refused.
    assert_unauthorized(await client.get(ME, headers=auth(old.token())), "does not publish")
    assert jwks_server.hits == 3


# --- provider outages -------------------------------------------------------------------------------


@pytest.mark.parametrize("outage", ["http_error", "not_json", "no_keys", "refused"])
async def test_cached_keys_keep_working_while_the_idp_is_down(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer, outage: str
) -> None:
    client = await idp_client(cooldown=0, cache_seconds=0.001)
    await me(client, idp_keys.rsa.token())
    assert jwks_server.hits == 1

    if outage == "refused":
        jwks_server.stop()
    elif outage == "no_keys":
        jwks_server.publish()
    else:
        jwks_server.mode = outage
    await asyncio.sleep(0.01)  # longer than cache_seconds: the next request tries to refresh

    await me(client, idp_keys.rsa.token())
    await me(client, idp_keys.ec.token())
    # Unknown kids are still a credentials problem (401), not an outage (503).
    assert_unauthorized(
        await client.get(ME, headers=auth(idp_keys.rsa.token(kid="forged"))), "does not publish"
    )
    if outage != "refused":
        assert jwks_server.hits == 4  # every request really tried the provider


async def test_idp_unreachable_from_the_start_is_503_not_401(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, refused_url: str
) -> None:
    client = await idp_client(jwks_url=refused_url, cooldown=0)
    for token in (idp_keys.rsa.token(), idp_keys.ec.token(kid="whatever")):
        assert_keys_unavailable(await client.get(ME, headers=auth(token)))


@pytest.mark.parametrize("outage", ["http_error", "not_json", "no_keys"])
async def test_idp_failing_from_the_start_is_503_until_it_recovers(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer, outage: str
) -> None:
    document = jwks_server.document
    if outage == "no_keys":
        jwks_server.publish()
    else:
        jwks_server.mode = outage
    client = await idp_client(cooldown=0)
    assert_keys_unavailable(await client.get(ME, headers=auth(idp_keys.rsa.token())))
    assert jwks_server.hits == 1

    jwks_server.mode, jwks_server.document = "ok", document
    await me(client, idp_keys.rsa.token())
    assert jwks_server.hits == 2


@pytest.mark.parametrize("document", [[], None, "keys", {"keys": "abc"}, {"keys": [1, 2]}, {}])
async def test_malformed_jwks_document_is_treated_as_an_outage(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer, document: Any
) -> None:
    jwks_server.document = document
    client = await idp_client(cooldown=0)
    assert_keys_unavailable(await client.get(ME, headers=auth(idp_keys.rsa.token())))


@pytest.mark.parametrize("keys", [None])
async def test_jwks_document_whose_keys_is_not_a_list_is_an_outage_not_a_500(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer, keys: Any
) -> None:
    jwks_server.document = {"keys": keys}
    client = await idp_client(cooldown=0)
    with structlog.testing.capture_logs():  # keeps the console renderer from drawing the traceback
        response = await client.get(ME, headers=auth(idp_keys.rsa.token()))
    assert_keys_unavailable(response)


async def test_retry_after_on_503_is_not_shorter_than_the_refetch_cooldown(
    idp_client: IdpClientFactory, idp_keys: IdpKeys, jwks_server: JwksServer
) -> None:
    jwks_server.mode = "http_error"
    client = await idp_client(cooldown=60)
    response = await client.get(ME, headers=auth(idp_keys.rsa.token()))
    assert_keys_unavailable(response)
    assert jwks_server.hits == 1
    # A client retrying after Retry-After seconds must get a new fetch attempt, so the header must
    # cover the rest of the cooldown (about 60 s here).
    assert int(response.headers["retry-after"]) >= 50
