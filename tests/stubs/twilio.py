"""A local Twilio REST server (the parts Parley uses), speaking Twilio's wire format, for tests.

- ``GET  /2010-04-01/Accounts/{sid}/IncomingPhoneNumbers.json`` (``PhoneNumber`` filter)
- ``POST /2010-04-01/Accounts/{sid}/IncomingPhoneNumbers/{PN...}.json`` (``VoiceUrl``, ``VoiceMethod``)
- ``POST /2010-04-01/Accounts/{sid}/Calls.json`` (``To``, ``From``, ``Url`` or ``Twiml``), answered 201
- ``POST /2010-04-01/Accounts/{sid}/Calls/{CA...}.json`` (update a live call: ``Twiml``, ``Url`` or
  ``Status``); an unknown call is 404 (20404), one no longer in progress 400 (21220)
Calls placed with ``StatusCallback`` / ``AsyncAmdStatusCallback`` get Twilio's callbacks when a test ends
them: :meth:`TwilioState.finish` and :meth:`TwilioState.answered_by` build the signed form posts Twilio
sends (``X-Twilio-Signature``: HMAC-SHA1 of the URL and the sorted parameters with the auth token); the
test posts them to Parley. ``hold`` keeps ``Calls.json`` from answering after
the call is placed (a dialer that dies while waiting). HTTP basic auth with the account SID and auth token; errors are Twilio's JSON ``{code, message,
more_info, status}``. ``outage`` answers 503 to everything; lists are paged (``PageSize`` capped by ``max_page_size``,
``next_page_uri``) as Twilio does.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
AUTH_TOKEN = "stub-twilio-auth-token-0123456789"


def twilio_signature(url: str, params: dict[str, str], token: str = AUTH_TOKEN) -> str:
    """Twilio's X-Twilio-Signature: base64(HMAC-SHA1(token, url + name1 + value1 + ...)), names sorted."""
    data = url + "".join(key + params[key] for key in sorted(params))
    return base64.b64encode(hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()).decode()


@dataclass(frozen=True)
class Callback:
    """One callback request as Twilio sends it: a signed form POST to ``url``."""

    url: str
    params: dict[str, str]
    signature: str

    @classmethod
    def signed(cls, url: str, params: dict[str, str]) -> Callback:
        return cls(url, params, twilio_signature(url, params))

    @property
    def headers(self) -> dict[str, str]:
        return {"Content-Type": "application/x-www-form-urlencoded", "X-Twilio-Signature": self.signature}


@dataclass
class TwilioState:
    numbers: dict[str, dict[str, Any]] = field(default_factory=dict)  # sid -> number resource
    calls: list[dict[str, str]] = field(default_factory=list)
    # the calls Twilio carries right now (incoming ones are announced with ``ring``), by CallSid
    live: dict[str, dict[str, str]] = field(default_factory=dict)
    updates: list[dict[str, str]] = field(default_factory=list)  # every call update, in order
    outage: bool = False
    max_page_size: int = 1000
    hold: threading.Event | None = None  # set: Calls.json answers; unset: it waits after placing
    placed: threading.Event = field(default_factory=threading.Event)  # set on every placed call
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def reset(self) -> None:
        self.numbers.clear()
        self.calls.clear()
        self.live.clear()
        self.updates.clear()
        self.outage = False
        self.max_page_size = 1000
        self.hold = None
        self.placed.clear()

    def call_for(self, to: str) -> list[dict[str, str]]:
        return [c for c in self.calls if c.get("To") == to]

    def finish(self, sid: str, status: str = "completed", duration: int = 42) -> Callback | None:
        """End a call with ``status`` (completed, busy, no-answer, failed, canceled): the status
        callback Twilio sends for it, or None when the call asked for none."""
        call = next(c for c in self.calls if c["sid"] == sid)
        self.live[sid]["status"] = status
        url = call.get("StatusCallback")
        if not url:
            return None
        params = {
            "AccountSid": ACCOUNT_SID,
            "ApiVersion": "2010-04-01",
            "CallSid": sid,
            "CallStatus": status,
            "Called": call["To"],
            "Caller": call["From"],
            "Direction": "outbound-api",
            "From": call["From"],
            "To": call["To"],
            "CallDuration": str(duration if status == "completed" else 0),
            "Timestamp": "Wed, 25 Nov 2026 20:00:00 +0000",
            "CallbackSource": "call-progress-events",
            "SequenceNumber": "0",
        }
        return Callback.signed(url, params)

    def answered_by(self, sid: str, answered_by: str) -> Callback | None:
        """The asynchronous answering-machine detection result (``AnsweredBy``: human, machine_start,
        machine_end_beep, machine_end_silence, machine_end_other, fax, unknown)."""
        call = next(c for c in self.calls if c["sid"] == sid)
        url = call.get("AsyncAmdStatusCallback")
        if not url or call.get("AsyncAmd") != "true":
            return None
        self.live[sid]["status"] = "in-progress"
        params = {
            "AccountSid": ACCOUNT_SID,
            "CallSid": sid,
            "AnsweredBy": answered_by,
            "MachineDetectionDuration": "2300",
        }
        return Callback.signed(url, params)

    def ring(self, call_sid: str, from_: str, to: str) -> None:
        """An incoming call that Twilio now carries (its voice webhook is Parley's business)."""
        self.live[call_sid] = {"sid": call_sid, "from": from_, "to": to, "status": "in-progress"}

    def add_number(self, phone_number: str, voice_url: str = "") -> str:
        sid = f"PN{next(self._ids):032x}"
        self.numbers[sid] = {
            "sid": sid,
            "account_sid": ACCOUNT_SID,
            "phone_number": phone_number,
            "friendly_name": phone_number,
            "voice_url": voice_url,
            "voice_method": "POST",
        }
        return sid


def _error(status: int, code: int, message: str) -> JSONResponse:
    return JSONResponse(
        {
            "code": code,
            "message": message,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        },
        status_code=status,
    )


def make_twilio_stub(state: TwilioState) -> Starlette:
    def check(request: Request) -> JSONResponse | None:
        header = request.headers.get("authorization", "")
        expected = "Basic " + base64.b64encode(f"{ACCOUNT_SID}:{AUTH_TOKEN}".encode()).decode()
        if header != expected or request.path_params["sid"] != ACCOUNT_SID:
            return _error(401, 20003, "Authenticate")
        if state.outage:
            return _error(503, 20500, "Service Unavailable: Twilio is having a bad day")
        return None

    async def numbers(request: Request) -> JSONResponse:
        if (refused := check(request)) is not None:
            return refused
        wanted = request.query_params.get("PhoneNumber")
        items = [n for n in state.numbers.values() if wanted is None or n["phone_number"] == wanted]
        size = min(int(request.query_params.get("PageSize", "50")), state.max_page_size)
        page = int(request.query_params.get("Page", "0"))
        chunk = items[page * size : (page + 1) * size]
        next_uri = None
        if (page + 1) * size < len(items):
            next_uri = f"/2010-04-01/Accounts/{ACCOUNT_SID}/IncomingPhoneNumbers.json?PageSize={size}&Page={page + 1}"
        return JSONResponse(
            {"incoming_phone_numbers": chunk, "page": page, "page_size": size, "next_page_uri": next_uri}
        )

    async def update_number(request: Request) -> JSONResponse:
        if (refused := check(request)) is not None:
            return refused
        number = state.numbers.get(request.path_params["pn"])
        if number is None:
            return _error(404, 20404, "The requested resource was not found")
        form = await request.form()
        for key, field_name in (("VoiceUrl", "voice_url"), ("VoiceMethod", "voice_method")):
            if key in form:
                number[field_name] = str(form[key])
        return JSONResponse(number)

    async def calls(request: Request) -> JSONResponse:
        if (refused := check(request)) is not None:
            return refused
        form = {k: str(v) for k, v in (await request.form()).items()}
        if not form.get("To"):
            return _error(400, 21201, "No 'To' number is specified")
        if form.get("From") not in {n["phone_number"] for n in state.numbers.values()}:
            return _error(
                400,
                21210,
                f"The source phone number provided, {form.get('From')}, is not yet verified for your account.",
            )
        if not (form.get("Url") or form.get("Twiml")):
            return _error(400, 21205, "Url or Twiml parameter is required")
        sid = f"CA{next(state._ids):032x}"
        state.calls.append({"sid": sid, **form})
        state.live[sid] = {"sid": sid, "from": form["From"], "to": form["To"], "status": "queued"}
        state.placed.set()
        if state.hold is not None:
            await asyncio.to_thread(state.hold.wait, 60)
        return JSONResponse(
            {
                "sid": sid,
                "status": "queued",
                "to": form["To"],
                "from": form["From"],
                "account_sid": ACCOUNT_SID,
            },
            status_code=201,
        )

    async def update_call(request: Request) -> JSONResponse:
        if (refused := check(request)) is not None:
            return refused
        call = state.live.get(request.path_params["ca"])
        if call is None:
            return _error(404, 20404, "The requested resource was not found")
        form = {k: str(v) for k, v in (await request.form()).items()}
        if call["status"] in ("completed", "canceled", "failed", "busy", "no-answer"):
            return _error(400, 21220, "Call is not in-progress. Cannot redirect.")
        if not (form.get("Twiml") or form.get("Url") or form.get("Status")):
            return _error(400, 21205, "Url, Twiml or Status parameter is required")
        if form.get("Status") in ("completed", "canceled"):
            call["status"] = form["Status"]
        state.updates.append({"sid": call["sid"], **form})
        return JSONResponse(
            {
                "sid": call["sid"],
                "status": call["status"],
                "to": call["to"],
                "from": call["from"],
                "account_sid": ACCOUNT_SID,
            }
        )

    base = "/2010-04-01/Accounts/{sid}"
    return Starlette(
        routes=[
            Route(f"{base}/IncomingPhoneNumbers.json", numbers, methods=["GET"]),
            Route(f"{base}/IncomingPhoneNumbers/{{pn}}.json", update_number, methods=["POST"]),
            Route(f"{base}/Calls.json", calls, methods=["POST"]),
            Route(f"{base}/Calls/{{ca}}.json", update_call, methods=["POST"]),
        ]
    )
