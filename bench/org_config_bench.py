"""Benchmark: how long a privacy setting changed on one process goes unseen by another's turns
(distributed mode, the per-organization configuration cache, kit/orgcache.py).

Two ``parley serve`` processes (A, B) share a fresh PostgreSQL database and Redis (``PARLEY_REDIS_URL``).
Each round starts a conversation (an echo flow) on B and has B run a turn, so B keeps the organization's
privacy settings in its cache; then redaction is switched (on, off, on...) through A's API and B is sent
the same caller text again and again until its turn keeps it the new way (``[phone]`` or the number).
Reported: the delay from A's answer to B's first turn that applies the change (median, p90, p99, max)
and B's turn time (the floor of that delay: each probe is one turn).

With ``--baseline TREE`` a second pair runs the ``src`` of another source tree (e.g. the commit before
the bus, where entries lived 1 s with Redis and nothing was published) on a database of its own; the
rounds alternate between the two pairs.

    .venv/bin/python bench/org_config_bench.py [--rounds 50] [--baseline /tmp/before]

Needs PostgreSQL on 127.0.0.1:5432 and Redis on 127.0.0.1:6379 (database 9, key prefixes of its own).
"""

from __future__ import annotations

import argparse
import base64
import os
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

PHONE = "ruf mich an unter 0171 9876543"
REDACTED = "ruf mich an unter [phone]"
ECHO = {
    "language": "en",
    "start_node": "ask",
    "nodes": [
        {"id": "ask", "type": "collect", "variable": "said", "prompt": "Say something.", "next": "echo"},
        {"id": "echo", "type": "say", "text": "Echo {{ said }}.", "next": "ask"},
    ],
}


class Pair:
    """A and B on one database and one Redis prefix, running the ``src`` of ``tree``."""

    def __init__(self, label: str, tree: Path, tmp: Path) -> None:
        self.label = label
        self.database = f"parley_bench_{uuid.uuid4().hex[:8]}"
        self.prefix = f"bench-{uuid.uuid4().hex[:8]}"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
        self.env.update(
            {
                "PYTHONPATH": str(tree / "src"),
                "PARLEY_DATABASE_URL": f"postgresql+asyncpg://postgres@127.0.0.1:5432/{self.database}",
                "PARLEY_REDIS_URL": REDIS_URL,
                "PARLEY_REDIS_PREFIX": self.prefix,
                "PARLEY_AUTH_JWT_SECRET": JWT_SECRET,
                "PARLEY_SECRET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("="),
                "PARLEY_LOG_LEVEL": "WARNING",
                "PARLEY_RATE_LIMIT_PER_MINUTE": "0",
                "PARLEY_RATE_LIMIT_ORG_PER_MINUTE": "0",
            }
        )
        self.tmp = tmp / label
        self.delays: list[float] = []
        self.turns: list[float] = []

    def start(self) -> None:
        admin(f'CREATE DATABASE "{self.database}"')
        subprocess.run(
            [sys.executable, "-m", "parley", "db", "upgrade"], env=self.env, check=True, capture_output=True
        )
        urls = []
        for name in ("a", "b"):
            port = free_port()
            data = self.tmp / name
            data.mkdir(parents=True)
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "parley", "serve", "--port", str(port)],
                    env={**self.env, "PARLEY_DATA_DIR": str(data)},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            else:
                raise RuntimeError(f"{url} did not start")
        self.a, self.b = urls
        owner = {"Authorization": f"Bearer {token('bench-owner')}"}
        org = httpx.post(f"{self.a}/api/organizations", json={"name": "Bench"}, headers=owner).json()["id"]
        self.headers = {**owner, "X-Organization-Id": org}
        flow = httpx.post(
            f"{self.a}/api/flows", json={"name": "Echo", "definition": ECHO}, headers=self.headers
        ).json()["id"]
        assert httpx.post(f"{self.a}/api/flows/{flow}/publish", headers=self.headers).status_code == 200
        self.flow = flow
        self.redaction = False
        self._switch(False)  # the settings row exists from here on

    def _switch(self, enabled: bool) -> None:
        changed = httpx.patch(
            f"{self.a}/api/privacy/settings", json={"redaction_enabled": enabled}, headers=self.headers
        )
        assert changed.status_code == 200, changed.text
        self.redaction = enabled

    def _said(self, client: httpx.Client, session: str) -> str:
        """One turn on B; what B's transcript keeps of the caller's text."""
        start = time.perf_counter()
        turn = client.post(
            f"{self.b}/api/sessions/{session}/messages", json={"text": PHONE}, headers=self.headers
        )
        self.turns.append(time.perf_counter() - start)
        assert turn.status_code == 200, turn.text
        return str([t["text"] for t in turn.json()["transcript"] if t["speaker"] == "caller"][-1])

    def round(self) -> None:
        with httpx.Client() as client:
            session = client.post(f"{self.b}/api/sessions", json={"flow_id": self.flow}, headers=self.headers)
            assert session.status_code == 200, session.text
            session_id = session.json()["id"]
            before = REDACTED if self.redaction else PHONE
            assert self._said(client, session_id) == before  # B keeps the settings now
            after = PHONE if self.redaction else REDACTED
            self._switch(not self.redaction)
            start = time.perf_counter()
            while self._said(client, session_id) != after:
                if time.perf_counter() - start > 60:
                    raise RuntimeError("B never applied the change")
            self.delays.append(time.perf_counter() - start)

    def stop(self) -> None:
        stop(self.processes, self.database, self.prefix)


def _ms(values: list[float], share: float) -> float:
    ordered = sorted(v * 1000 for v in values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--baseline", type=Path, help="another source tree to run side by side")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pairs = [Pair("this tree", ROOT, Path(tmp))]
        if args.baseline is not None:
            pairs.append(Pair(f"baseline {args.baseline}", args.baseline, Path(tmp)))
        try:
            for pair in pairs:
                pair.start()
            time.sleep(2)  # the buses subscribe after start-up
            for index in range(args.rounds):
                for pair in pairs if index % 2 == 0 else reversed(pairs):
                    pair.round()
        finally:
            for pair in pairs:
                pair.stop()
    print(
        f"\n| tree ({args.rounds} changes on A) | median ms | p90 ms | p99 ms | max ms | B's turn, median ms |"
    )
    print("|---|---|---|---|---|---|")
    for pair in pairs:
        delays = pair.delays
        print(
            f"| {pair.label} | {statistics.median(delays) * 1000:.1f} | {_ms(delays, 0.9):.1f} | "
            f"{_ms(delays, 0.99):.1f} | {max(delays) * 1000:.1f} | {statistics.median(pair.turns) * 1000:.1f} |"
        )


if __name__ == "__main__":
    main()
