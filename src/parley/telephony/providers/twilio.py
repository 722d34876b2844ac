"""Twilio: incoming phone numbers (their voice webhook), outbound calls, and webhook signatures.

Every call goes through the SSRF-guarded client (``parley.kit.outbound``); the API base is the
provider configuration's ``api_base`` (``https://api.twilio.com`` unless a test points it elsewhere).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from parley.kit.outbound import OutboundPolicy, explain, guarded_client, read_limited
from parley.providers.catalog import TwilioConfig
from parley.telephony.providers import ProviderFailure

API_VERSION = "2010-04-01"
MAX_RESPONSE_BYTES = 2 * 1024 * 1024
MAX_PAGES = 50


def compute_signature(auth_token: str, url: str, params: Iterable[tuple[str, str]]) -> str:
    """Twilio's request signature: HMAC-SHA1 over the full URL followed by every POST parameter
    (sorted by name, then value; each name immediately followed by its value), base64-encoded."""
    grouped: dict[str, set[str]] = {}
    for key, value in params:
        grouped.setdefault(key, set()).add(value)
    data = url + "".join(key + value for key in sorted(grouped) for value in sorted(grouped[key]))
    digest = hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def signature_valid(auth_token: str, url: str, params: Iterable[tuple[str, str]], signature: str) -> bool:
    expected = compute_signature(auth_token, url, params)
    return hmac.compare_digest(expected.encode(), signature.strip().encode())


@dataclass(frozen=True)
class TwilioNumber:
    sid: str
    phone_number: str
    voice_url: str | None
    voice_method: str | None
    friendly_name: str | None


@dataclass(frozen=True)
class TwilioCallInfo:
    sid: str
    status: str


class TwilioClient:
    def __init__(self, config: TwilioConfig, policy: OutboundPolicy, *, timeout: float = 10.0) -> None:
        self.config = config
        self.policy = policy
        self.timeout = timeout

    @property
    def _account_url(self) -> str:
        return f"{self.config.api_base}/{API_VERSION}/Accounts/{self.config.account_sid}"

    def _url(self, path: str) -> str:
        # Paging links (``next_page_uri``) are absolute paths from the API root; the rest are relative
        # to the account. Either way the host stays the configured API base.
        if path.startswith(f"/{API_VERSION}/Accounts/{self.config.account_sid}/"):
            return self.config.api_base + path
        return self._account_url + path

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        auth = (self.config.account_sid, self.config.auth_token.get_secret_value())
        async with guarded_client(self.policy, timeout=self.timeout) as client:
            try:
                async with client.stream(
                    method, self._url(path), params=params, data=data, auth=auth
                ) as response:
                    body = await read_limited(response, MAX_RESPONSE_BYTES)
            except httpx.HTTPError as exc:
                raise ProviderFailure("Twilio", explain(exc)) from exc
        try:
            decoded: Any = httpx.Response(200, content=body).json() if body else {}
        except ValueError:
            decoded = {}
        if response.status_code >= 400:
            message = decoded.get("message") if isinstance(decoded, dict) else None
            reason = str(message)[:300] if message else f"HTTP {response.status_code}"
            raise ProviderFailure("Twilio", reason, status=response.status_code)
        if not isinstance(decoded, dict):
            raise ProviderFailure("Twilio", "the answer was not a JSON object")
        return decoded

    async def list_numbers(self, phone_number: str | None = None) -> list[TwilioNumber]:
        """The account's incoming phone numbers (all pages), or the one matching ``phone_number``."""
        params = {"PageSize": "1000"}
        if phone_number:
            params["PhoneNumber"] = phone_number
        page = await self._request("GET", "/IncomingPhoneNumbers.json", params=params)
        numbers: list[TwilioNumber] = []
        for _ in range(MAX_PAGES):
            items = page.get("incoming_phone_numbers") or []
            numbers += [_number(item) for item in items if isinstance(item, dict)]
            next_uri = page.get("next_page_uri")
            if not isinstance(next_uri, str) or not next_uri:
                break
            page = await self._request("GET", next_uri)
        return numbers

    async def set_voice_url(self, number_sid: str, voice_url: str) -> TwilioNumber:
        item = await self._request(
            "POST",
            f"/IncomingPhoneNumbers/{number_sid}.json",
            data={"VoiceUrl": voice_url, "VoiceMethod": "POST"},
        )
        return _number(item)

    async def update_call(self, call_sid: str, *, twiml: str) -> TwilioCallInfo:
        """Redirect a live call to new TwiML (the Calls resource's update). Twilio ends what the call
        was doing (its media stream) and runs ``twiml``; a call that is no longer in progress is
        refused (Twilio's 21220) and becomes a :class:`ProviderFailure`."""
        item = await self._request("POST", f"/Calls/{call_sid}.json", data={"Twiml": twiml})
        return TwilioCallInfo(sid=str(item.get("sid") or call_sid), status=str(item.get("status") or ""))

    async def create_call(
        self,
        *,
        to: str,
        from_: str,
        twiml: str,
        status_callback: str | None = None,
        amd_callback: str | None = None,
    ) -> TwilioCallInfo:
        """Place a call running ``twiml``. ``status_callback``: Twilio posts the call's final status
        there (``CallStatus``: completed, busy, no-answer, failed, canceled). ``amd_callback``: answering
        machine detection runs (``MachineDetection=DetectMessageEnd``, asynchronously, so the caller is
        not kept waiting) and Twilio posts ``AnsweredBy`` there."""
        data = {"To": to, "From": from_, "Twiml": twiml}
        if status_callback:
            data |= {
                "StatusCallback": status_callback,
                "StatusCallbackMethod": "POST",
                "StatusCallbackEvent": "completed",
            }
        if amd_callback:
            data |= {
                "MachineDetection": "DetectMessageEnd",
                "AsyncAmd": "true",
                "AsyncAmdStatusCallback": amd_callback,
                "AsyncAmdStatusCallbackMethod": "POST",
            }
        item = await self._request("POST", "/Calls.json", data=data)
        return TwilioCallInfo(sid=str(item.get("sid") or ""), status=str(item.get("status") or "queued"))

    async def end_call(self, call_sid: str) -> TwilioCallInfo:
        """Hang up a live call (the Calls resource's update with ``Status=completed``)."""
        item = await self._request("POST", f"/Calls/{call_sid}.json", data={"Status": "completed"})
        return TwilioCallInfo(sid=str(item.get("sid") or call_sid), status=str(item.get("status") or ""))


def _number(item: dict[str, Any]) -> TwilioNumber:
    return TwilioNumber(
        sid=str(item.get("sid") or ""),
        phone_number=str(item.get("phone_number") or ""),
        voice_url=item.get("voice_url") or None,
        voice_method=item.get("voice_method") or None,
        friendly_name=item.get("friendly_name") or None,
    )
