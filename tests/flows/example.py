"""The reference agent of docs/flows.md (it ships in parley.demo.flows), and helpers to edit copies."""

from __future__ import annotations

import copy
from typing import Any

from parley.demo.flows import ORDER_STATUS_FLOW


def order_flow() -> dict[str, Any]:
    return copy.deepcopy(ORDER_STATUS_FLOW)


def node(definition: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(n for n in definition["nodes"] if n["id"] == node_id)
