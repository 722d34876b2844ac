"""Benchmark: how long a key revoked on one process keeps working on another (distributed mode).

Two ``parley serve`` processes (A, B) share a fresh PostgreSQL database and Redis (``PARLEY_REDIS_URL``).
For each round a new API key is made on A and used on B until B answers it from its identity cache; then
the key is revoked on A and B is asked again and again until it refuses the key. Reported: the delay
from A's answer to the revocation to B's first 401 (median, p90, max), and, to show what the cache
saves, the same for a removed member.

    .venv/bin/python bench/identity_bench.py [--rounds 30]

Needs PostgreSQL on 127.0.0.1:5432 and Redis on 127.0.0.1:6379 (database 9, a key prefix of its own).
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.cluster import JWT_SECRET, REDIS_URL, admin, free_port, stop, token  # noqa: E402


def _hits(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    match = re.search(r'^parley_identity_cache_lookups_total\{result="hit"\} ([0-9.e+]+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def _warm(url: str, path: str, headers: dict[str, str]) -> None:
    for _ in range(400):
        before = _hits(url)
        assert httpx.get(f"{url}{path}", headers=headers).status_code == 200
        if _hits(url) > before:
            return
        time.sleep(0.05)
    raise RuntimeError("B never answered from its cache")


def _until_refused(url: str, path: str, headers: dict[str, str], refused: int) -> float:
    """Seconds until ``url`` answers ``refused``, asking as fast as one client can."""
    with httpx.Client() as client:
        start = time.perf_counter()
        while time.perf_counter() - start < 60:
            if client.get(f"{url}{path}", headers=headers).status_code == refused:
                return time.perf_counter() - start
    raise RuntimeError("never refused")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    name = f"parley_bench_{uuid.uuid4().hex[:8]}"
    admin(f'CREATE DATABASE "{name}"')
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
            env.update(
                {
                    "PYTHONPATH": str(ROOT / "src"),
                    "PARLEY_DATABASE_URL": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}",
                    "PARLEY_REDIS_URL": REDIS_URL,
                    "PARLEY_REDIS_PREFIX": prefix,
                    "PARLEY_AUTH_JWT_SECRET": JWT_SECRET,
                    "PARLEY_SECRET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32))
                    .decode()
                    .rstrip("="),
                    "PARLEY_LOG_LEVEL": "WARNING",
                    "PARLEY_RATE_LIMIT_PER_MINUTE": "0",
                    "PARLEY_RATE_LIMIT_ORG_PER_MINUTE": "0",
                }
            )
            subprocess.run(
                [sys.executable, "-m", "parley", "db", "upgrade"], env=env, check=True, capture_output=True
            )
            urls = []
            for label in ("a", "b"):
                port = free_port()
                data = Path(tmp) / label
                data.mkdir()
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "parley", "serve", "--port", str(port)],
                        env={**env, "PARLEY_DATA_DIR": str(data)},
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
                urls.append(f"http://127.0.0.1:{port}")
            for url in urls:
                for _ in range(300):
                    try:
                        if httpx.get(f"{url}/healthz").status_code == 200:
                            break
                    except httpx.TransportError:
                        time.sleep(0.1)
            a, b = urls
            owner = {"Authorization": f"Bearer {token('bench-owner')}"}
            org = httpx.post(f"{a}/api/organizations", json={"name": "Bench"}, headers=owner).json()["id"]
            owner["X-Organization-Id"] = org
            key_delays: list[float] = []
            member_delays: list[float] = []
            for index in range(args.rounds):
                created = httpx.post(f"{a}/api/api-keys", json={"name": f"k{index}"}, headers=owner).json()
                key = {"Authorization": f"Bearer {created['secret']}"}
                _warm(b, "/api/me", key)
                assert (
                    httpx.post(f"{a}/api/api-keys/{created['id']}/revoke", headers=owner).status_code == 200
                )
                key_delays.append(_until_refused(b, "/api/me", key, 401))

                subject = f"member-{index}"
                added = httpx.post(
                    f"{a}/api/organizations/{org}/members",
                    json={"subject": subject, "role": "member"},
                    headers=owner,
                ).json()
                member = {"Authorization": f"Bearer {token(subject)}", "X-Organization-Id": org}
                _warm(b, f"/api/organizations/{org}", member)
                removed = httpx.delete(
                    f"{a}/api/organizations/{org}/members/{added['user_id']}", headers=owner
                )
                assert removed.status_code == 200
                member_delays.append(_until_refused(b, f"/api/organizations/{org}", member, 404))
    finally:
        stop(processes, name, prefix)

    print(f"\n| change on A, refused on B ({args.rounds} rounds) | median ms | p90 ms | max ms |")
    print("|---|---|---|---|")
    for label, delays in (("revoked API key → 401", key_delays), ("removed member → 404", member_delays)):
        ordered = sorted(d * 1000 for d in delays)
        p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
        print(f"| {label} | {statistics.median(ordered):.1f} | {p90:.1f} | {ordered[-1]:.1f} |")


if __name__ == "__main__":
    main()
