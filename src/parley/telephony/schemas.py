"""Request and response bodies of the telephony routes."""

from __future__ import annotations

import ipaddress
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, model_validator

from parley.kit.schemas import E164, StrictModel


def _check_address(value: str) -> str:
    value = value.strip()
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", value):
            raise ValueError(f"{value!r} is neither an IP address, a CIDR range nor a host name") from None
    return value


Address = Annotated[str, Field(min_length=1, max_length=255), AfterValidator(_check_address)]
NumberProvider = Literal["twilio", "livekit"]
Direction = Literal["inbound", "outbound"]
RuleType = Literal["individual", "direct", "callee"]
Transport = Literal["auto", "udp", "tcp", "tls"]
RoomPart = Annotated[str, Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9_.:-]+$")]
Pin = Annotated[str, Field(min_length=1, max_length=20, pattern=r"^[0-9]+$")]
AttributeKey = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]
Name = Annotated[str, Field(min_length=1, max_length=120)]
FlowId = Annotated[str, Field(min_length=1, max_length=40)]


# --- phone numbers -------------------------------------------------------------------------------


class PhoneNumberCreate(StrictModel):
    number: E164 = Field(description="The number in E.164 format, e.g. +4930123456.")
    provider: NumberProvider = Field(description="The provider that carries the number.")
    name: Name | None = None
    flow_id: FlowId | None = Field(default=None, description="The flow that answers calls to the number.")


class PhoneNumberUpdate(StrictModel):
    name: Name | None = None
    flow_id: FlowId | None = Field(default=None, description="The answering flow; null detaches it.")
    provider: NumberProvider | None = None


class PhoneNumberOut(BaseModel):
    id: str
    number: str
    provider: str
    name: str | None
    flow_id: str | None
    provider_id: str | None
    synced_at: datetime | None
    created_at: datetime
    updated_at: datetime


# --- trunks --------------------------------------------------------------------------------------


class TrunkCreate(StrictModel):
    name: Name
    direction: Direction
    numbers: list[E164] = Field(default_factory=list, max_length=100)
    allowed_addresses: list[Address] = Field(
        default_factory=list, max_length=100, description="Inbound only: IPs or CIDRs allowed to call in."
    )
    allowed_numbers: list[E164] = Field(
        default_factory=list, max_length=100, description="Inbound only: caller numbers allowed."
    )
    address: Address | None = Field(default=None, description="Outbound only: the SIP server to dial.")
    transport: Transport | None = Field(default=None, description="Outbound only.")
    auth_username: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    auth_password: Annotated[str, Field(min_length=1, max_length=500)] | None = Field(
        default=None, description="Stored encrypted; responses show a masked hint."
    )

    @model_validator(mode="after")
    def _fits_direction(self) -> TrunkCreate:
        check_trunk_shape(
            self.direction, self.address, self.transport, self.allowed_addresses, self.allowed_numbers
        )
        if self.direction == "outbound" and not self.numbers:
            raise ValueError("an outbound trunk needs at least one number to call from")
        return self


def check_trunk_shape(
    direction: str,
    address: str | None,
    transport: str | None,
    allowed_addresses: list[str],
    allowed_numbers: list[str],
) -> None:
    if direction == "outbound":
        if not address:
            raise ValueError("an outbound trunk needs the address of the SIP server to dial")
        if allowed_addresses or allowed_numbers:
            raise ValueError("allowed_addresses and allowed_numbers apply to inbound trunks only")
    elif address or transport:
        raise ValueError("address and transport apply to outbound trunks only")


class TrunkUpdate(StrictModel):
    name: Name | None = None
    numbers: list[E164] | None = Field(default=None, max_length=100)
    allowed_addresses: list[Address] | None = Field(default=None, max_length=100)
    allowed_numbers: list[E164] | None = Field(default=None, max_length=100)
    address: Address | None = None
    transport: Transport | None = None
    auth_username: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    auth_password: Annotated[str, Field(min_length=1, max_length=500)] | None = Field(
        default=None, description="A new password; null removes it; omit to keep it."
    )


class TrunkOut(BaseModel):
    id: str
    name: str
    direction: str
    numbers: list[str]
    allowed_addresses: list[str]
    allowed_numbers: list[str]
    address: str | None
    transport: str | None
    auth_username: str | None
    auth_password: str | None = Field(description="Masked hint of the password, if one is set.")
    provider_id: str | None
    synced_at: datetime | None
    created_at: datetime
    updated_at: datetime


# --- dispatch rules ------------------------------------------------------------------------------


class DispatchRuleCreate(StrictModel):
    name: Name
    rule_type: RuleType = Field(
        description="individual: a new room per caller; direct: every caller into one room; "
        "callee: a room per called number."
    )
    room_prefix: RoomPart | None = Field(
        default=None, description="Prefix of the rooms (individual, callee)."
    )
    room_name: RoomPart | None = Field(default=None, description="The room (direct rules).")
    pin: Pin | None = Field(default=None, description="Digits callers must enter; stored encrypted.")
    trunk_ids: list[Annotated[str, Field(min_length=1, max_length=40)]] = Field(
        default_factory=list, max_length=50, description="Trunks (trk_...) the rule applies to; empty: all."
    )
    numbers: list[E164] = Field(
        default_factory=list, max_length=100, description="Called numbers it matches."
    )
    attributes: dict[AttributeKey, Annotated[str, Field(max_length=500)]] = Field(
        default_factory=dict, max_length=50, description="Attributes of the caller's participant."
    )
    flow_id: FlowId | None = Field(default=None, description="The flow dispatched to the call.")

    @model_validator(mode="after")
    def _fits_type(self) -> DispatchRuleCreate:
        check_rule_shape(self.rule_type, self.room_name, self.room_prefix)
        return self


def check_rule_shape(rule_type: str, room_name: str | None, room_prefix: str | None) -> None:
    if rule_type == "direct" and not room_name:
        raise ValueError("a direct rule needs room_name, the room every caller joins")
    if rule_type != "direct" and room_name:
        raise ValueError("room_name applies to direct rules only; use room_prefix")


class DispatchRuleUpdate(StrictModel):
    name: Name | None = None
    room_prefix: RoomPart | None = None
    room_name: RoomPart | None = None
    pin: Pin | None = None
    trunk_ids: list[Annotated[str, Field(min_length=1, max_length=40)]] | None = Field(
        default=None, max_length=50
    )
    numbers: list[E164] | None = Field(default=None, max_length=100)
    attributes: dict[AttributeKey, Annotated[str, Field(max_length=500)]] | None = Field(
        default=None, max_length=50
    )
    flow_id: FlowId | None = None


class DispatchRuleOut(BaseModel):
    id: str
    name: str
    rule_type: str
    room_prefix: str | None
    room_name: str | None
    pin: str | None = Field(description="Masked hint of the PIN, if one is set.")
    trunk_ids: list[str]
    numbers: list[str]
    attributes: dict[str, Any]
    flow_id: str | None
    provider_id: str | None
    synced_at: datetime | None
    created_at: datetime
    updated_at: datetime


class DispatchRuleDeletedOut(BaseModel):
    id: str
    deleted: bool = True
    provider_deleted: bool = Field(description="Whether the rule was also deleted at the provider.")


# --- sync ----------------------------------------------------------------------------------------


class SyncItem(BaseModel):
    kind: Literal["trunk", "dispatch_rule", "phone_number"]
    id: str | None = Field(description="Parley's id; null for what exists only at the provider.")
    provider: str
    provider_id: str | None
    name: str | None = None
    detail: str | None = None


class SyncReport(BaseModel):
    organization_id: str
    created: list[SyncItem]
    updated: list[SyncItem]
    unchanged: list[SyncItem]
    orphaned: list[SyncItem] = Field(description="At the provider only; reported, never deleted.")
    errors: list[SyncItem]


# --- calls ---------------------------------------------------------------------------------------
