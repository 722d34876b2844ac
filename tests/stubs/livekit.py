"""A local LiveKit SIP service speaking the real Twirp protocol, for tests.

``POST /twirp/livekit.SIP/<Method>`` with a protobuf (``application/protobuf``) or JSON body, answered
in the same encoding with ``livekit-protocol``'s messages, as LiveKit's server does. Requests must carry
``Authorization: Bearer <JWT>`` signed with the stub's API secret and holding a ``sip`` grant (``admin``
to manage trunks and rules, ``call`` to dial); errors are Twirp JSON bodies ``{"code", "msg"}``.
State lives in memory. ``outage`` makes every call answer 503; ``fail_methods`` fails chosen methods;
clearing ``gate`` holds every call (after recording it) until the gate is set again.
``TransferSIPParticipant`` transfers a SIP participant of the room (dialled with ``CreateSIPParticipant``
or announced with ``join``); a target in ``busy`` fails as LiveKit reports a SIP failure (Twirp
metadata ``sip_status_code``, ``sip_status``, ``sip_transfer_reason``). ``livekit.RoomService/RemoveParticipant``
(a ``roomAdmin`` video grant for the room) hangs a participant up.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from livekit.api.access_token import TokenVerifier
from livekit.protocol import room, sip
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

API_KEY = "APIstubkey"
API_SECRET = "stub-livekit-secret-" + "s" * 24


@dataclass
class LiveKitState:
    inbound: dict[str, sip.SIPInboundTrunkInfo] = field(default_factory=dict)
    outbound: dict[str, sip.SIPOutboundTrunkInfo] = field(default_factory=dict)
    rules: dict[str, sip.SIPDispatchRuleInfo] = field(default_factory=dict)
    participants: list[sip.CreateSIPParticipantRequest] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # method names, in order
    # SIP participants in rooms, (room, identity); transferred ones with their target
    in_rooms: set[tuple[str, str]] = field(default_factory=set)
    transfers: list[sip.TransferSIPParticipantRequest] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)  # participants hung up, (room, identity)
    busy: set[str] = field(default_factory=set)  # transfer targets that answer 486 Busy Here
    outage: bool = False
    fail_methods: set[str] = field(default_factory=set)
    gate: threading.Event = field(default_factory=threading.Event)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self.gate.set()

    def reset(self) -> None:
        self.inbound.clear()
        self.outbound.clear()
        self.rules.clear()
        self.participants.clear()
        self.calls.clear()
        self.in_rooms.clear()
        self.transfers.clear()
        self.removed.clear()
        self.busy.clear()
        self.outage = False
        self.fail_methods.clear()
        self.gate.set()

    def join(self, room: str, identity: str) -> None:
        """A SIP participant (an inbound caller) in ``room``."""
        self.in_rooms.add((room, identity))

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"


class TwirpError(Exception):
    def __init__(self, status: int, code: str, msg: str, meta: dict[str, str] | None = None) -> None:
        super().__init__(msg)
        self.status, self.code, self.msg, self.meta = status, code, msg, meta or {}


def _not_found(what: str, ident: str) -> TwirpError:
    return TwirpError(404, "not_found", f"{what} {ident} not found")


def make_livekit_stub(state: LiveKitState) -> Starlette:
    def create_inbound(req: sip.CreateSIPInboundTrunkRequest) -> Message:
        trunk = sip.SIPInboundTrunkInfo()
        trunk.CopyFrom(req.trunk)
        trunk.sip_trunk_id = state.new_id("ST")
        state.inbound[trunk.sip_trunk_id] = trunk
        return trunk

    def create_outbound(req: sip.CreateSIPOutboundTrunkRequest) -> Message:
        if not req.trunk.address:
            raise TwirpError(400, "invalid_argument", "no trunk address specified")
        trunk = sip.SIPOutboundTrunkInfo()
        trunk.CopyFrom(req.trunk)
        trunk.sip_trunk_id = state.new_id("ST")
        state.outbound[trunk.sip_trunk_id] = trunk
        return trunk

    def update_inbound(req: sip.UpdateSIPInboundTrunkRequest) -> Message:
        if req.sip_trunk_id not in state.inbound:
            raise _not_found("trunk", req.sip_trunk_id)
        if req.WhichOneof("action") != "replace":
            raise TwirpError(501, "unimplemented", "only replace is supported by the stub")
        trunk = sip.SIPInboundTrunkInfo()
        trunk.CopyFrom(req.replace)
        trunk.sip_trunk_id = req.sip_trunk_id
        state.inbound[req.sip_trunk_id] = trunk
        return trunk

    def update_outbound(req: sip.UpdateSIPOutboundTrunkRequest) -> Message:
        if req.sip_trunk_id not in state.outbound:
            raise _not_found("trunk", req.sip_trunk_id)
        if req.WhichOneof("action") != "replace":
            raise TwirpError(501, "unimplemented", "only replace is supported by the stub")
        trunk = sip.SIPOutboundTrunkInfo()
        trunk.CopyFrom(req.replace)
        trunk.sip_trunk_id = req.sip_trunk_id
        state.outbound[req.sip_trunk_id] = trunk
        return trunk

    def list_inbound(req: sip.ListSIPInboundTrunkRequest) -> Message:
        return sip.ListSIPInboundTrunkResponse(items=list(state.inbound.values()))

    def list_outbound(req: sip.ListSIPOutboundTrunkRequest) -> Message:
        return sip.ListSIPOutboundTrunkResponse(items=list(state.outbound.values()))

    def delete_trunk(req: sip.DeleteSIPTrunkRequest) -> Message:
        if req.sip_trunk_id in state.inbound:
            gone = state.inbound.pop(req.sip_trunk_id)
            return sip.SIPTrunkInfo(sip_trunk_id=gone.sip_trunk_id, name=gone.name)
        if req.sip_trunk_id in state.outbound:
            gone_out = state.outbound.pop(req.sip_trunk_id)
            return sip.SIPTrunkInfo(sip_trunk_id=gone_out.sip_trunk_id, name=gone_out.name)
        raise _not_found("trunk", req.sip_trunk_id)

    def create_rule(req: sip.CreateSIPDispatchRuleRequest) -> Message:
        rule = sip.SIPDispatchRuleInfo()
        if req.HasField("dispatch_rule"):
            rule.CopyFrom(req.dispatch_rule)
        else:  # the legacy flat fields
            rule.rule.CopyFrom(req.rule)
            rule.trunk_ids.extend(req.trunk_ids)
            rule.name, rule.metadata = req.name, req.metadata
        if rule.rule.WhichOneof("rule") is None:
            raise TwirpError(400, "invalid_argument", "dispatch rule type is required")
        for trunk_id in rule.trunk_ids:
            if trunk_id not in state.inbound:
                raise _not_found("trunk", trunk_id)
        rule.sip_dispatch_rule_id = state.new_id("SDR")
        state.rules[rule.sip_dispatch_rule_id] = rule
        return rule

    def update_rule(req: sip.UpdateSIPDispatchRuleRequest) -> Message:
        if req.sip_dispatch_rule_id not in state.rules:
            raise _not_found("dispatch rule", req.sip_dispatch_rule_id)
        if req.WhichOneof("action") != "replace":
            raise TwirpError(501, "unimplemented", "only replace is supported by the stub")
        rule = sip.SIPDispatchRuleInfo()
        rule.CopyFrom(req.replace)
        rule.sip_dispatch_rule_id = req.sip_dispatch_rule_id
        state.rules[req.sip_dispatch_rule_id] = rule
        return rule

    def list_rules(req: sip.ListSIPDispatchRuleRequest) -> Message:
        return sip.ListSIPDispatchRuleResponse(items=list(state.rules.values()))

    def delete_rule(req: sip.DeleteSIPDispatchRuleRequest) -> Message:
        if req.sip_dispatch_rule_id not in state.rules:
            raise _not_found("dispatch rule", req.sip_dispatch_rule_id)
        return state.rules.pop(req.sip_dispatch_rule_id)

    def create_participant(req: sip.CreateSIPParticipantRequest) -> Message:
        if req.sip_trunk_id not in state.outbound:
            raise _not_found("trunk", req.sip_trunk_id)
        if not req.sip_call_to:
            raise TwirpError(400, "invalid_argument", "missing sip_call_to")
        state.participants.append(req)
        state.in_rooms.add((req.room_name, req.participant_identity))
        return sip.SIPParticipantInfo(
            participant_id=state.new_id("PA"),
            participant_identity=req.participant_identity,
            room_name=req.room_name,
            sip_call_id=state.new_id("SCL"),
        )

    def transfer_participant(req: sip.TransferSIPParticipantRequest) -> Message:
        key = (req.room_name, req.participant_identity)
        if key not in state.in_rooms:
            raise _not_found("participant", f"{req.participant_identity} in room {req.room_name}")
        if not req.transfer_to.startswith(("tel:", "sip:")):
            raise TwirpError(400, "invalid_argument", "transfer_to must be a tel: or sip: URI")
        state.transfers.append(req)
        if req.transfer_to.removeprefix("tel:") in state.busy:
            raise TwirpError(
                412,
                "failed_precondition",
                "transfer failed",
                {"sip_status_code": "486", "sip_status": "Busy Here", "sip_transfer_reason": "STR_REJECTED"},
            )
        state.in_rooms.discard(key)  # the caller left the room for the target
        return sip.TransferSIPParticipantResponse(
            transfer_id=state.new_id("STX"), status=sip.SIPTransferStatus.STS_TRANSFER_SUCCESSFUL
        )

    def remove_participant(req: room.RoomParticipantIdentity) -> Message:
        key = (req.room, req.identity)
        if key not in state.in_rooms:
            raise _not_found("participant", f"{req.identity} in room {req.room}")
        state.in_rooms.discard(key)
        state.removed.append(key)
        return room.RemoveParticipantResponse()

    room_methods: dict[str, tuple[type[Message], Any, str]] = {
        "RemoveParticipant": (room.RoomParticipantIdentity, remove_participant, "room_admin"),
    }

    methods: dict[str, tuple[type[Message], Any, str]] = {
        "CreateSIPInboundTrunk": (sip.CreateSIPInboundTrunkRequest, create_inbound, "admin"),
        "CreateSIPOutboundTrunk": (sip.CreateSIPOutboundTrunkRequest, create_outbound, "admin"),
        "UpdateSIPInboundTrunk": (sip.UpdateSIPInboundTrunkRequest, update_inbound, "admin"),
        "UpdateSIPOutboundTrunk": (sip.UpdateSIPOutboundTrunkRequest, update_outbound, "admin"),
        "ListSIPInboundTrunk": (sip.ListSIPInboundTrunkRequest, list_inbound, "admin"),
        "ListSIPOutboundTrunk": (sip.ListSIPOutboundTrunkRequest, list_outbound, "admin"),
        "DeleteSIPTrunk": (sip.DeleteSIPTrunkRequest, delete_trunk, "admin"),
        "CreateSIPDispatchRule": (sip.CreateSIPDispatchRuleRequest, create_rule, "admin"),
        "UpdateSIPDispatchRule": (sip.UpdateSIPDispatchRuleRequest, update_rule, "admin"),
        "ListSIPDispatchRule": (sip.ListSIPDispatchRuleRequest, list_rules, "admin"),
        "DeleteSIPDispatchRule": (sip.DeleteSIPDispatchRuleRequest, delete_rule, "admin"),
        "CreateSIPParticipant": (sip.CreateSIPParticipantRequest, create_participant, "call"),
        "TransferSIPParticipant": (sip.TransferSIPParticipantRequest, transfer_participant, "call"),
    }
    verifier = TokenVerifier(API_KEY, API_SECRET)

    def error(exc: TwirpError) -> JSONResponse:
        body: dict[str, Any] = {"code": exc.code, "msg": exc.msg}
        if exc.meta:
            body["meta"] = exc.meta
        return JSONResponse(body, status_code=exc.status)

    async def twirp(request: Request) -> Response:
        method = request.path_params["method"]
        service = "RoomService" if request.url.path.startswith("/twirp/livekit.RoomService/") else "SIP"
        table = room_methods if service == "RoomService" else methods
        if method not in table:
            return error(
                TwirpError(404, "bad_route", f"no handler for path /twirp/livekit.{service}/{method}")
            )
        request_class, handler, grant = table[method]
        header = request.headers.get("authorization", "")
        if not header.startswith("Bearer "):
            return error(TwirpError(401, "unauthenticated", "authorization header missing"))
        try:
            claims = verifier.verify(header[len("Bearer ") :])
        except Exception:
            return error(TwirpError(401, "unauthenticated", "invalid token"))
        # RoomService grants name a room: checked against the decoded body below.
        if service == "SIP" and not (claims.sip is not None and getattr(claims.sip, grant, False)):
            return error(TwirpError(403, "permission_denied", f"sip {grant} permission required"))
        state.calls.append(method)
        while not state.gate.is_set():
            await asyncio.sleep(0.01)
        if state.outage:
            return error(TwirpError(503, "unavailable", "LiveKit SIP service is down for maintenance"))
        if method in state.fail_methods:
            return error(TwirpError(500, "internal", f"{method} failed inside LiveKit"))
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        raw = await request.body()
        try:
            if content_type == "application/json":
                message = json_format.Parse(raw or b"{}", request_class())
            elif content_type == "application/protobuf":
                message = request_class.FromString(raw)
            else:
                return error(TwirpError(400, "malformed", f"unexpected Content-Type {content_type!r}"))
        except (DecodeError, json_format.ParseError):
            return error(TwirpError(400, "malformed", "the body could not be decoded"))
        if service == "RoomService":
            video = claims.video
            if video is None or not video.room_admin or video.room != getattr(message, "room", ""):
                return error(
                    TwirpError(403, "permission_denied", "roomAdmin permission for the room required")
                )
        try:
            answer = handler(message)
        except TwirpError as exc:
            return error(exc)
        if content_type == "application/json":
            return Response(json_format.MessageToJson(answer), media_type="application/json")
        return Response(answer.SerializeToString(), media_type="application/protobuf")

    return Starlette(
        routes=[
            Route("/twirp/livekit.SIP/{method}", twirp, methods=["POST"]),
            Route("/twirp/livekit.RoomService/{method}", twirp, methods=["POST"]),
        ]
    )
