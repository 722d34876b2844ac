"""Distributed mode end to end: real processes on loopback behave as one service.

Two API processes (``parley serve`` on port A, and ``parley serve --workers 2`` on port B) and one
``parley worker`` share a fresh PostgreSQL database, a Redis database with a key prefix of this run's
own, and S3-compatible blob storage (moto's server). Nothing is shared on disk: every process has a
data directory of its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import redis
from moto.server import ThreadedMotoServer
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests import migrated, pg
from tests.conftest import JWT_SECRET, auth, make_token
from tests.distributed import redis_env
from tests.live import free_port

RATE_LIMIT = 60
WAIT_FLOW = {
    "language": "en",
    "start_node": "ask",
    "nodes": [
        {
            "id": "ask",
            "type": "collect",
            "variable": "number",
            "kind": "digits",
            "prompt": "Your number?",
            "next": "bye",
        },
        {"id": "bye", "type": "end", "text": "Thanks."},
    ],
}
HOURS = "Opening hours: the workshop is open Monday to Friday from 7 to 18 and on Saturday from 8 to 12."


class Cluster:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.port_a, self.port_b, self.metrics_port = free_port(), free_port(), free_port()
        self.a = f"http://127.0.0.1:{self.port_a}"
        self.b = f"http://127.0.0.1:{self.port_b}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, *args: str) -> None:
        data_dir = self.root / name
        data_dir.mkdir()
        with (self.root / f"{name}.log").open("wb") as log:  # the child keeps its own descriptor
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "parley", *args],
                env={**self.env, "PARLEY_DATA_DIR": str(data_dir)},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in sorted(self.root.glob("*.log"))
        )

    def wait_ready(self) -> None:
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
        client = redis.Redis.from_url(redis_env.REDIS_URL)
        try:
            for _ in range(600):  # the worker's first poll writes its health key
                self._check_alive()
                if client.exists(f"{self.env['PARLEY_REDIS_PREFIX']}:worker-health"):
                    return
                time.sleep(0.1)
        finally:
            client.close()
        raise AssertionError(f"the worker did not start\n{self.logs()}")

    def _check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise AssertionError(f"{name} exited with {process.returncode}\n{self.logs()}")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    redis_env.require_redis()
    prefix = redis_env.new_prefix()
    db_name, db_url = migrated.postgres("parley_cluster")
    moto_port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=moto_port, verbose=False)
    moto.start()
    endpoint = f"http://127.0.0.1:{moto_port}"
    boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    ).create_bucket(Bucket="parley-cluster")
    root = tmp_path_factory.mktemp("cluster")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PARLEY_") and key != "PYTHONPATH"
    }
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p.endswith("src"))
            or os.environ.get("PYTHONPATH", ""),
            "PARLEY_DATABASE_URL": db_url,
            "PARLEY_REDIS_URL": redis_env.REDIS_URL,
            "PARLEY_REDIS_PREFIX": prefix,
            "PARLEY_AUTH_JWT_SECRET": JWT_SECRET,
            "PARLEY_SECRET_KEY": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("="),
            "PARLEY_BLOB_URL": "s3://parley-cluster/blobs",
            "PARLEY_S3_ENDPOINT_URL": endpoint,
            "PARLEY_S3_REGION": "us-east-1",
            "PARLEY_S3_ACCESS_KEY_ID": "k",
            "PARLEY_S3_SECRET_ACCESS_KEY": "s",
            "PARLEY_RATE_LIMIT_PER_MINUTE": str(RATE_LIMIT),
            "PARLEY_DB_POOL_SIZE": "5",
            "PARLEY_LOG_LEVEL": "INFO",
            "PARLEY_LOG_JSON": "true",
        }
    )
    cluster = Cluster(root, env)
    try:
        cluster.spawn("api-a", "serve", "--port", str(cluster.port_a))
        cluster.spawn("api-b", "serve", "--port", str(cluster.port_b), "--workers", "2")
        cluster.spawn("worker", "worker", "--concurrency", "2", "--metrics-port", str(cluster.metrics_port))
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()
        moto.stop()
        pg.drop_database(db_name)
        redis_env.cleanup(prefix)


def _org(cluster: Cluster, user: str) -> dict[str, str]:
    token = make_token(user)
    created = httpx.post(
        f"{cluster.a}/api/organizations", json={"name": f"Org of {user}"}, headers=auth(token)
    )
    assert created.status_code == 200, created.text
    return auth(token, created.json()["id"])


def _until(check: Any, attempts: int = 600, pause: float = 0.25) -> Any:
    for _ in range(attempts):
        value = check()
        if value:
            return value
        time.sleep(pause)
    raise AssertionError("the condition was not met")


@pytest.mark.slow
def test_a_document_uploaded_on_a_is_ingested_by_the_worker_and_searchable_on_b(cluster: Cluster) -> None:
    headers = _org(cluster, "knowledge-user")
    uploaded = httpx.post(
        f"{cluster.a}/api/knowledge/documents",
        files={"file": ("hours.txt", HOURS.encode(), "text/plain"), "title": (None, "Opening hours")},
        headers=headers,
    )
    assert uploaded.status_code == 200, uploaded.text
    doc_id = uploaded.json()["id"]

    def ready() -> dict[str, Any] | None:
        doc = httpx.get(f"{cluster.b}/api/knowledge/documents/{doc_id}", headers=headers).json()
        return doc if doc["status"] != "pending" else None

    doc = _until(ready)
    assert doc["status"] == "ready", f"{doc}\n{cluster.logs()}"
    found = httpx.post(
        f"{cluster.b}/api/knowledge/search", json={"query": "Saturday opening hours"}, headers=headers
    )
    assert found.status_code == 200, found.text
    assert found.json()["results"] and found.json()["results"][0]["document_id"] == doc_id
    # the worker ran it (the API processes only queue jobs): its own /metrics counts it, once the
    # handler has returned (the document is visible as ready a moment before that)
    # (at least once: a worker that starts after the upload may also pick the pending document up in
    # its start-up recovery, and ingesting twice yields the same document)
    counted = re.compile(r'parley_jobs_processed_total\{job="knowledge\.ingest_document"\} [1-9]')

    def scraped() -> str | None:
        text = httpx.get(f"http://127.0.0.1:{cluster.metrics_port}/metrics").text
        return text if counted.search(text) else None

    metrics = _until(scraped)  # the same budget as the ingestion: a loaded machine is slow, not wrong
    assert "parley_job_queue_depth" in metrics


def test_the_rate_limit_is_shared_by_a_and_b(cluster: Cluster) -> None:
    headers = auth(make_token("burst-user"))
    statuses: list[int] = []
    # Each process alone would allow 60 of its own (120 in all, alternating): shared, the 429 comes
    # after about 60 (a few more when the burst crosses a minute, as the window slides).
    for n in range(2 * RATE_LIMIT):
        response = httpx.get(f"{cluster.a if n % 2 else cluster.b}/api/me", headers=headers)
        statuses.append(response.status_code)
        if response.status_code == 429:
            assert int(response.headers["Retry-After"]) >= 1
            assert response.json()["code"]
            break
    assert statuses[:RATE_LIMIT] == [200] * RATE_LIMIT
    assert statuses[-1] == 429, f"no 429 after {len(statuses)} requests"
    assert len(statuses) < 2 * RATE_LIMIT - 10


def _session(cluster: Cluster, headers: dict[str, str]) -> str:
    flow = httpx.post(
        f"{cluster.a}/api/flows", json={"name": "Wait", "definition": WAIT_FLOW}, headers=headers
    )
    assert flow.status_code == 200, flow.text
    published = httpx.post(f"{cluster.a}/api/flows/{flow.json()['id']}/publish", headers=headers)
    assert published.status_code == 200, published.text
    created = httpx.post(
        f"{cluster.a}/api/sessions", json={"flow_id": flow.json()["id"], "voiced": True}, headers=headers
    )
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def _live_ids(url: str, headers: dict[str, str]) -> set[str]:
    response = httpx.get(f"{url}/api/monitoring/sessions/live", headers=headers)
    assert response.status_code == 200, response.text
    return {item["id"] for item in response.json()["items"]}


async def test_a_live_audio_session_held_by_a_is_ended_through_b(cluster: Cluster) -> None:
    headers = _org(cluster, "voice-user")
    session_id = _session(cluster, headers)
    assert session_id in _live_ids(cluster.a, headers) and session_id in _live_ids(cluster.b, headers)
    ws_url = cluster.a.replace("http://", "ws://") + f"/api/sessions/{session_id}/audio"
    async with connect(ws_url, additional_headers=headers) as ws:
        ready = json.loads(await asyncio.wait_for(ws.recv(), 30))
        assert ready["type"] == "ready", ready
        # The voice toggle reaches the holder too (it mutes its output); the session stays live.
        voiced = await asyncio.to_thread(
            httpx.post,
            f"{cluster.b}/api/sessions/{session_id}/voice",
            json={"voiced": False},
            headers=headers,
        )
        assert voiced.status_code == 200 and voiced.json()["voiced"] is False
        ended = await asyncio.to_thread(
            httpx.post, f"{cluster.b}/api/sessions/{session_id}/end", headers=headers
        )
        assert ended.status_code == 200, ended.text
        events: list[dict[str, Any]] = []
        with pytest.raises(ConnectionClosed):
            while True:
                message = await asyncio.wait_for(ws.recv(), 30)
                if isinstance(message, str):
                    events.append(json.loads(message))
        assert ws.close_code == 1000
    assert {"type": "end", "outcome": "abandoned", "reason": "ended_by_client"} in events, events
    assert not any(e["type"] == "error" for e in events), events
    row = httpx.get(f"{cluster.a}/api/sessions/{session_id}", headers=headers).json()
    assert row["status"] == "ended" and row["end_reason"] == "ended_by_client"  # not overwritten by A
    assert session_id not in _live_ids(cluster.a, headers) | _live_ids(cluster.b, headers)


def test_a_session_started_on_a_is_ended_on_b(cluster: Cluster) -> None:
    headers = _org(cluster, "text-user")
    session_id = _session(cluster, headers)
    answered = httpx.post(
        f"{cluster.b}/api/sessions/{session_id}/messages", json={"text": "4 2"}, headers=headers
    )
    assert answered.status_code == 200, answered.text
    again = _session(cluster, headers)
    assert httpx.post(f"{cluster.b}/api/sessions/{again}/end", headers=headers).status_code == 200
    assert httpx.post(f"{cluster.a}/api/sessions/{again}/end", headers=headers).status_code == 409


def test_the_worker_stops_gracefully_on_sigterm(cluster: Cluster) -> None:
    worker = cluster.processes["worker"]
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, cluster.logs()
    assert "worker_stopped" in (cluster.root / "worker.log").read_text()
