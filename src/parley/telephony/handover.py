"""Handing a live call over to a person: the flow engine's phone line (``CallControlPort``).

- **Twilio**: the live call is redirected through the Calls resource to TwiML that says the flow's
  message and ``<Dial>``s the target. ``<Dial action>`` and the ``<Number>``'s ``answered`` status
  callback come back to ``POST /api/telephony/twilio/dial?session=<id>`` (signed like the voice
  webhook): answered or completed → the session ends as ``transferred``; busy, no-answer, failed or
  canceled → the caller is back in the same session's flow (the failure branch, with an apology) over
  a new media stream with a fresh stream token.
- **LiveKit SIP**: ``TransferSIPParticipant`` of the room's SIP participant (``phone-<session id>`` in
  ``parley-<session id>``); it answers once the target took the call, so the session ends as
  ``transferred`` in the same turn, or the failure branch runs at once.
- **No phone line** (web, WebSocket test call, text chat): ``unavailable``, the flow's failure branch.
"""

from __future__ import annotations

from urllib.parse import urlencode
from xml.sax.saxutils import escape, quoteattr

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.identity import system_context
from parley.auth.stream_tokens import issue_stream_token
from parley.config import Settings
from parley.kit.db import short_read
from parley.kit.errors import Forbidden, NotFound
from parley.providers.catalog import TwilioConfig
from parley.runtime.ports import HandOver
from parley.runtime.state import ConversationState
from parley.sessions import service as sessions
from parley.sessions.models import ConversationSession
from parley.telephony import service as telephony
from parley.telephony.models import TwilioCall
from parley.telephony.providers import ProviderFailure
from parley.telephony.providers.livekit import LiveKitSip
from parley.telephony.providers.twilio import TwilioClient, signature_valid

log = structlog.get_logger("parley.telephony.handover")

DIAL_CALLBACK_PATH = "/api/telephony/twilio/dial"
RING_SECONDS = 30  # how long the target may ring before the caller comes back
SAY_LANGUAGES = {"de": "de-DE", "en": "en-US", "fr": "fr-FR", "es": "es-ES", "it": "it-IT", "nl": "nl-NL"}
# How Twilio's <Dial> can end (DialCallStatus); the first two mean the target took the call.
CONNECTED = ("completed", "answered")
NOT_CONNECTED = ("busy", "no-answer", "failed", "canceled")


def say_language(language: str) -> str:
    return SAY_LANGUAGES.get(language[:2].lower(), language if "-" in language else "en-US")


def dial_callback_url(settings: Settings, session_id: str, **extra: str) -> str:
    """Where Twilio reports the dial (and signs the request): the public URL, the path, the session."""
    query = urlencode({"session": session_id, **extra})
    return settings.base_url.rstrip("/") + DIAL_CALLBACK_PATH + "?" + query


def twiml_dial(settings: Settings, session_id: str, target: str, message: str, language: str) -> str:
    say = f"<Say language={quoteattr(say_language(language))}>{escape(message)}</Say>" if message else ""
    action = dial_callback_url(settings, session_id)
    answered = dial_callback_url(settings, session_id, event="answered")
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response>{say}"
        f'<Dial action={quoteattr(action)} method="POST" timeout="{RING_SECONDS}" answerOnBridge="true">'
        f'<Number statusCallbackEvent="answered" statusCallback={quoteattr(answered)} '
        f'statusCallbackMethod="POST">{escape(target)}</Number>'
        "</Dial></Response>"
    )


def twiml_say_hangup(lines: list[str], language: str) -> str:
    said = "".join(f"<Say language={quoteattr(say_language(language))}>{escape(t)}</Say>" for t in lines if t)
    return f'<?xml version="1.0" encoding="UTF-8"?><Response>{said}<Hangup/></Response>'


async def twilio_call_of(session: AsyncSession, organization_id: str, session_id: str) -> TwilioCall | None:
    """The Twilio call carrying the session (the newest, should Twilio have retried)."""
    found = await session.scalar(
        select(TwilioCall)
        .where(TwilioCall.organization_id == organization_id, TwilioCall.session_id == session_id)
        .order_by(TwilioCall.created_at.desc())
        .limit(1)
    )
    return found


class PhoneLine:
    """The ``CallControlPort`` of one session: transfers its Twilio or LiveKit SIP call."""

    def __init__(
        self, session: AsyncSession, settings: Settings, organization_id: str, session_id: str, channel: str
    ) -> None:
        self.session = session
        self.settings = settings
        self.organization_id = organization_id
        self.session_id = session_id
        self.channel = channel

    async def transfer(self, target: str, message: str, language: str) -> HandOver:
        if self.channel != "phone":
            return HandOver(
                "unavailable",
                reason=f"A {self.channel} conversation has no phone line that could be transferred.",
            )
        # Look-ups in a short read of their own: no transaction is held while the provider answers.
        async with short_read(self.session) as reader:
            call = await twilio_call_of(reader, self.organization_id, self.session_id)
            twilio = await telephony.twilio_for(reader, self.settings, self.organization_id) if call else None
            livekit = (
                None if call else await telephony.livekit_for(reader, self.settings, self.organization_id)
            )
        if call is not None:
            return await self._twilio(twilio, call.call_sid, target, message, language)
        return await self._livekit(livekit, target)

    async def hang_up(self) -> None:
        """A Twilio call hangs up by itself once its media stream closes after the last words (its
        TwiML has nothing after ``<Connect>``). A LiveKit SIP participant stays in its room, which has
        no Parley voice: it is removed, so its SIP call ends."""
        if self.channel != "phone":
            return
        async with short_read(self.session) as reader:
            if await twilio_call_of(reader, self.organization_id, self.session_id) is not None:
                return
            livekit = await telephony.livekit_for(reader, self.settings, self.organization_id)
        if livekit is None:
            return
        try:
            async with livekit as lk:
                await lk.remove_participant(
                    room_name=f"parley-{self.session_id}", identity=f"phone-{self.session_id}"
                )
        except ProviderFailure as exc:
            if not exc.not_found:  # already gone: nothing to hang up
                log.warning(
                    "hang_up_failed", provider="livekit", session_id=self.session_id, reason=exc.reason
                )

    async def _twilio(
        self, twilio: TwilioClient | None, call_sid: str, target: str, message: str, language: str
    ) -> HandOver:
        if twilio is None:
            return HandOver("failed", "twilio", "Twilio is no longer configured in this organization.")
        twiml = twiml_dial(self.settings, self.session_id, target, message, language)
        try:
            await twilio.update_call(call_sid, twiml=twiml)
        except ProviderFailure as exc:
            log.warning("transfer_refused", provider="twilio", session_id=self.session_id, reason=exc.reason)
            return HandOver("failed", "twilio", f"Twilio refused the transfer: {exc.reason}")
        log.info("transfer_dialing", provider="twilio", session_id=self.session_id)
        return HandOver("dialing", "twilio")

    async def _livekit(self, livekit: LiveKitSip | None, target: str) -> HandOver:
        if livekit is None:
            return HandOver(
                "unavailable", reason="This phone call has no Twilio or LiveKit line to transfer."
            )
        try:
            async with livekit as lk:
                await lk.transfer_sip_participant(
                    room_name=f"parley-{self.session_id}",
                    identity=f"phone-{self.session_id}",
                    transfer_to=f"tel:{target}",
                    ringing_seconds=RING_SECONDS,
                )
        except ProviderFailure as exc:
            log.warning("transfer_refused", provider="livekit", session_id=self.session_id, reason=exc.reason)
            return HandOver("failed", "livekit", f"LiveKit could not transfer the call: {exc.reason}")
        return HandOver("transferred", "livekit")


def _first(params: list[tuple[str, str]], key: str) -> str:
    return next((value for name, value in params if name == key), "")


async def answer_dial_callback(
    session: AsyncSession,
    settings: Settings,
    session_id: str,
    params: list[tuple[str, str]],
    signature: str | None,
    query: str,
) -> str:
    """TwiML for Twilio's report on a transfer's ``<Dial>`` (its ``action``, or the ``answered``
    status callback of the dialled number). 403 unsigned, forged, or not the session's call."""
    if not signature:
        raise Forbidden("The request carries no X-Twilio-Signature header.")
    row = await session.scalar(select(ConversationSession).where(ConversationSession.id == session_id))
    config = (
        await telephony.provider_config(session, settings, row.organization_id, "twilio") if row else None
    )
    url = settings.base_url.rstrip("/") + DIAL_CALLBACK_PATH + (f"?{query}" if query else "")
    if row is None or not isinstance(config, TwilioConfig):
        raise Forbidden("The request is not signed by a Twilio account configured in Parley.")
    if not signature_valid(config.auth_token.get_secret_value(), url, params, signature):
        raise Forbidden("The X-Twilio-Signature does not match the request.")
    call = await twilio_call_of(session, row.organization_id, row.id)
    sids = {_first(params, "CallSid"), _first(params, "ParentCallSid")}
    if call is None or call.call_sid not in sids:
        raise Forbidden("The call reported is not the call of this session.")
    dial_status = _first(params, "DialCallStatus")
    if not dial_status:  # the dialled number's status callback: answered means handed over
        if _first(params, "CallStatus") in ("in-progress", "answered"):
            await _report(session, settings, row, "answered")
        return '<?xml version="1.0" encoding="UTF-8"?><Response/>'
    if dial_status in CONNECTED:
        await _report(session, settings, row, "completed")
        return twiml_say_hangup([], "en")
    # The caller hung up while the target rang: nobody to bring back.
    caller_gone = _first(params, "CallStatus") in ("completed", "canceled", "failed", "busy", "no-answer")
    row, lines, moved = await _report(session, settings, row, dial_status, caller_gone=caller_gone)
    language = row.language or "en"
    if not moved or row.status != "active":
        # Reported before (or replayed), or the flow ended at the failure branch: say what there
        # is to say, then hang up. Only the report that brings the caller back gets a stream token.
        return twiml_say_hangup(lines if moved else [], language)
    token, _ = issue_stream_token(
        settings,
        organization_id=row.organization_id,
        session_id=row.id,
        issued_by="twilio",
        purpose="twilio-media",
    )
    return telephony.twiml_connect(settings, token)


async def _report(
    session: AsyncSession,
    settings: Settings,
    row: ConversationSession,
    status: str,
    *,
    caller_gone: bool = False,
) -> tuple[ConversationSession, list[str], bool]:
    """Hand the dial's result to the session: the session, the lines the caller is to hear now, and
    whether this report changed anything (False: the session was not dialling)."""
    context = system_context(row.organization_id, actor="twilio", name="Twilio dial callback")
    try:
        row, result = await sessions.transfer_ended(
            session, settings, context, row.id, status, caller_gone=caller_gone
        )
    except NotFound:  # the flow was deleted meanwhile
        return row, [], False
    log.info("transfer_reported", session_id=row.id, status=status, session_status=row.status)
    return row, ConversationState.from_json(row.state).opening_lines(), bool(result.events)
