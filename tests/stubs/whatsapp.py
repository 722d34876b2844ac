"""A local stand-in for Meta's Graph API (WhatsApp Cloud API), speaking its real wire format.

``POST /{version}/{phone_number_id}/messages`` checks the bearer token (401 with Graph error code 190
otherwise) and the message body (400, code 100), records every request, and answers like the Cloud
API: ``{"messaging_product": "whatsapp", "contacts": [...], "messages": [{"id": "wamid..."}]}``.
``StubState.script`` steers the next answers: each entry is an HTTP status (with a Graph error body)
popped per request; when it is empty every request succeeds.

Also: :func:`meta_payload` builds an inbound notification as Meta sends it, and :func:`sign` signs
raw bytes exactly as Meta does (``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 with the app secret>``).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

_ERRORS = {
    400: (100, "Invalid parameter"),
    401: (190, "Error validating access token: Session has expired."),
    429: (130429, "Rate limit hit"),
    500: (1, "An unknown error occurred"),
    503: (2, "Service temporarily unavailable"),
}


@dataclass
class StubState:
    tokens: set[str] = field(default_factory=lambda: {"EAAG-test-access-token"})
    script: list[int] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def sent(self, to: str | None = None) -> list[str]:
        """Text bodies of the messages accepted (200), in order; optionally only those to ``to``."""
        return [
            r["json"]["text"]["body"]
            for r in self.requests
            if r["status"] == 200 and (to is None or r["json"].get("to") == to)
        ]


def graph_error(status: int, code: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "OAuthException", "code": code, "fbtrace_id": "AbCdEf"}},
        status_code=status,
    )


def make_graph_stub(state: StubState) -> Starlette:
    async def messages(request: Request) -> JSONResponse:
        raw = await request.body()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        record = {
            "path": request.url.path,
            "version": request.path_params["version"],
            "phone_number_id": request.path_params["phone_number_id"],
            "authorization": request.headers.get("authorization"),
            "json": body,
            "status": 0,
        }
        state.requests.append(record)
        token = (request.headers.get("authorization") or "").removeprefix("Bearer ")
        if token not in state.tokens:
            record["status"] = 401
            return graph_error(401, *_ERRORS[401])
        text = (body or {}).get("text") if isinstance(body, dict) else None
        if (
            not isinstance(body, dict)
            or body.get("messaging_product") != "whatsapp"
            or body.get("type") != "text"
            or not body.get("to")
            or not isinstance(text, dict)
            or not isinstance(text.get("body"), str)
            or not 0 < len(text["body"]) <= 4096
        ):
            record["status"] = 400
            return graph_error(400, *_ERRORS[400])
        if state.script:
            status = state.script.pop(0)
            if status != 200:
                record["status"] = status
                code, message = _ERRORS.get(status, (1, "An unknown error occurred"))
                return graph_error(status, code, message)
        record["status"] = 200
        wamid = f"wamid.stub{next(state.counter):06d}"
        return JSONResponse(
            {
                "messaging_product": "whatsapp",
                "contacts": [{"input": body["to"], "wa_id": body["to"]}],
                "messages": [{"id": wamid}],
            }
        )

    return Starlette(routes=[Route("/{version}/{phone_number_id}/messages", messages, methods=["POST"])])


def sign(raw: bytes, app_secret: str) -> str:
    return "sha256=" + hmac.new(app_secret.encode(), raw, hashlib.sha256).hexdigest()


def meta_payload(
    phone_number_id: str, messages: list[dict[str, Any]], *, display: str = "15550001111"
) -> dict[str, Any]:
    """An inbound ``messages`` notification with Meta's envelope (one entry, one change)."""
    contacts = [{"profile": {"name": "Kunde"}, "wa_id": m["from"]} for m in messages]
    return {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": "102290129340398",
                "changes": [
                    {
                        "field": "messages",
                        "value": {
                            "messaging_product": "whatsapp",
                            "metadata": {"display_phone_number": display, "phone_number_id": phone_number_id},
                            "contacts": contacts,
                            "messages": messages,
                        },
                    }
                ],
            }
        ],
    }


def text_message(wamid: str, sender: str, body: str) -> dict[str, Any]:
    return {"from": sender, "id": wamid, "timestamp": "1763900000", "type": "text", "text": {"body": body}}
