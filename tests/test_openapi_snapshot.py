"""The OpenAPI document and the route order stay what they were: refactors must not change the API.

A deliberate API change updates the snapshots: ``make openapi-snapshot`` (which runs this file with
``PARLEY_UPDATE_OPENAPI_SNAPSHOT=1``), then review the diff of tests/openapi_snapshot.json and
tests/route_order_snapshot.txt like any other change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from parley.app import create_app
from parley.config import Settings
from tests.conftest import JWT_SECRET

HERE = Path(__file__).parent
SNAPSHOT = HERE / "openapi_snapshot.json"
ROUTE_ORDER = HERE / "route_order_snapshot.txt"
UPDATE = os.environ.get("PARLEY_UPDATE_OPENAPI_SNAPSHOT") == "1"


def _app(tmp_path: Path) -> Any:
    return create_app(Settings(auth_jwt_secret=JWT_SECRET, data_dir=tmp_path))  # type: ignore[arg-type]


def _canonical(document: dict[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def _route_order(document: dict[str, Any]) -> str:
    # The document lists paths in the order the routes are matched (first route of each path), so a
    # handler moved between packages must keep its place; the sorted snapshot above cannot see that.
    lines = [
        f"{method.upper()} {path} {operation.get('operationId', '')}"
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]
    return "\n".join(lines) + "\n"


def test_openapi_document_is_unchanged(tmp_path: Path) -> None:
    live = _canonical(_app(tmp_path).openapi())
    if UPDATE:
        SNAPSHOT.write_text(live, encoding="utf-8")
    assert live == SNAPSHOT.read_text(encoding="utf-8"), (
        "the OpenAPI document changed; if that is deliberate run `make openapi-snapshot` and review the diff"
    )


def test_route_order_is_unchanged(tmp_path: Path) -> None:
    live = _route_order(_app(tmp_path).openapi())
    if UPDATE:
        ROUTE_ORDER.write_text(live, encoding="utf-8")
    assert live == ROUTE_ORDER.read_text(encoding="utf-8"), (
        "the routes or their matching order changed; if that is deliberate run `make openapi-snapshot`"
    )
