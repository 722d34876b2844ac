"""The identity cache across processes: a revoked key or a removed member is refused on the other process.

Two ``parley serve`` processes (A and B) share a fresh PostgreSQL database and a Redis database with a
key prefix of this run's own. B answers a key's (or a member's) request from its cache (its /metrics
counts the hit), A revokes the key (removes the member), B receives the invalidation through Redis
(its /metrics counts it) and refuses the very next request. No timing is asserted: the delay is
measured by bench/identity_bench.py (docs/benchmarks.md).
"""

from __future__ import annotations

import base64
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import migrated, pg
from tests.conftest import JWT_SECRET, auth, make_token
from tests.distributed import redis_env
from tests.live import free_port

# two platform processes per module (their start alone takes 15 to 25 s): handed out first under xdist
pytestmark = pytest.mark.slow


class Pair:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.a = f"http://127.0.0.1:{free_port()}"
        self.b = f"http://127.0.0.1:{free_port()}"
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        for name, url in (("a", self.a), ("b", self.b)):
            data_dir = self.root / name
            data_dir.mkdir()
            with (self.root / f"{name}.log").open("wb") as log:
                self.processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "parley", "serve", "--port", url.rsplit(":", 1)[1]],
                        env={**self.env, "PARLEY_DATA_DIR": str(data_dir)},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        for url in (self.a, self.b):
            for _ in range(600):
                self._check_alive()
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            else:
                raise AssertionError(f"{url} did not start\n{self.logs()}")

    def _check_alive(self) -> None:
        for process in self.processes:
            if process.poll() is not None:
                raise AssertionError(f"a server exited with {process.returncode}\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.root.glob("*.log"))
        )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def metric(url: str, name: str, label: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    match = re.search(rf"^{name}\{{{label}\}} ([0-9.e+]+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def hits(url: str) -> float:
    return metric(url, "parley_identity_cache_lookups_total", 'result="hit"')


def received(url: str) -> float:
    return metric(url, "parley_identity_invalidations_total", 'origin="redis"')


def until(check: object, attempts: int = 400, pause: float = 0.05) -> None:
    for _ in range(attempts):
        if check():  # type: ignore[operator]
            return
        time.sleep(pause)
    raise AssertionError("the condition was not met")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    redis_env.require_redis()
    prefix = redis_env.new_prefix()
    db_name, db_url = migrated.postgres("parley_identity")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_") and k != "PYTHONPATH"}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p.endswith("src"))
            or os.environ.get("PYTHONPATH", ""),
            "PARLEY_DATABASE_URL": db_url,
            "PARLEY_REDIS_URL": redis_env.REDIS_URL,
            "PARLEY_REDIS_PREFIX": prefix,
            "PARLEY_AUTH_JWT_SECRET": JWT_SECRET,
            "PARLEY_SECRET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("="),
            "PARLEY_DB_POOL_SIZE": "5",
            "PARLEY_LOG_LEVEL": "WARNING",
        }
    )
    pair = Pair(tmp_path_factory.mktemp("identity"), env)
    try:
        pair.start()
        yield pair
    finally:
        pair.stop()
        pg.drop_database(db_name)
        redis_env.cleanup(prefix)


def _org(pair: Pair, user: str) -> dict[str, str]:
    created = httpx.post(
        f"{pair.a}/api/organizations", json={"name": f"Org of {user}"}, headers=auth(make_token(user))
    )
    assert created.status_code == 200, created.text
    return auth(make_token(user), created.json()["id"])


def _served_from_cache(url: str, path: str, headers: dict[str, str]) -> None:
    """Requests on ``url`` until one is answered from the cache (B subscribes shortly after start-up)."""

    def hit() -> bool:
        before = hits(url)
        response = httpx.get(f"{url}{path}", headers=headers)
        assert response.status_code == 200, response.text
        return hits(url) > before

    until(hit)


def test_a_key_revoked_on_a_is_refused_on_b(pair: Pair) -> None:
    owner = _org(pair, "key-owner")
    created = httpx.post(f"{pair.a}/api/api-keys", json={"name": "ci", "scopes": ["read"]}, headers=owner)
    assert created.status_code == 200, created.text
    key = {"Authorization": f"Bearer {created.json()['secret']}"}
    _served_from_cache(pair.b, "/api/me", key)
    seen = received(pair.b)

    revoked = httpx.post(f"{pair.a}/api/api-keys/{created.json()['id']}/revoke", headers=owner)
    assert revoked.status_code == 200, revoked.text
    until(lambda: received(pair.b) > seen)  # B dropped the key when Redis told it

    refused = httpx.get(f"{pair.b}/api/me", headers=key)
    assert refused.status_code == 401, refused.text
    assert refused.json()["detail"] == "The API key has been revoked."
    assert httpx.get(f"{pair.a}/api/me", headers=key).status_code == 401


def test_a_member_removed_on_a_is_refused_on_b(pair: Pair) -> None:
    owner = _org(pair, "member-owner")
    org = owner["X-Organization-Id"]
    added = httpx.post(
        f"{pair.a}/api/organizations/{org}/members",
        json={"subject": "leaving-member", "role": "member"},
        headers=owner,
    )
    assert added.status_code == 200, added.text
    member = auth(make_token("leaving-member"), org)
    _served_from_cache(pair.b, f"/api/organizations/{org}", member)
    seen = received(pair.b)

    user_id = added.json()["user_id"]
    removed = httpx.delete(f"{pair.a}/api/organizations/{org}/members/{user_id}", headers=owner)
    assert removed.status_code in (200, 204), removed.text
    until(lambda: received(pair.b) > seen)

    refused = httpx.get(f"{pair.b}/api/organizations/{org}", headers=member)
    assert refused.status_code == 404, refused.text
    assert refused.json()["detail"] == f"Organization {org!r} was not found."


def test_a_role_lowered_on_a_is_applied_on_b(pair: Pair) -> None:
    owner = _org(pair, "role-owner")
    org = owner["X-Organization-Id"]
    added = httpx.post(
        f"{pair.a}/api/organizations/{org}/members",
        json={"subject": "demoted", "role": "admin"},
        headers=owner,
    )
    assert added.status_code == 200, added.text
    admin = auth(make_token("demoted"), org)
    _served_from_cache(pair.b, "/api/api-keys", admin)
    seen = received(pair.b)

    changed = httpx.patch(
        f"{pair.a}/api/organizations/{org}/members/{added.json()['user_id']}",
        json={"role": "viewer"},
        headers=owner,
    )
    assert changed.status_code == 200, changed.text
    until(lambda: received(pair.b) > seen)

    refused = httpx.get(f"{pair.b}/api/api-keys", headers=admin)
    assert refused.status_code == 403, refused.text
