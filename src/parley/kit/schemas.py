"""Schema bases and field types every domain shares."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

# How serious a brain signal is: the scale of a flow's signal node (parley.flows.definition.SignalNode),
# of the built-in rules and of notification rules' minimum.
Severity = Literal["info", "low", "medium", "high", "critical"]


class StrictModel(BaseModel):
    """Request bodies refuse unknown fields, so nobody can smuggle in organization_id or roles."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class DeletedOut(BaseModel):
    id: str
    deleted: bool = True


# The one place Parley says what a phone number is. Two readings, two functions:
# - numbers people type (telephony, the calls API, channel routes) are normalised: the separators
#   people write (spaces, dots, dashes, brackets) are dropped first;
# - transfer targets (flows, the transfer tool) are dialled as written: nothing is dropped.
_SEPARATORS = re.compile(r"[\s().-]")
_E164 = re.compile(r"^\+[1-9][0-9]{1,14}$")
# Transfer targets and channel routes: 7 to 15 digits (a short code cannot be dialled or routed).
E164_PATTERN = r"^\+[1-9][0-9]{6,14}$"


def normalize_phone(value: str) -> str:
    """``+49 (176) 123-45`` → ``+4917612345``: the separators people write are dropped."""
    return _SEPARATORS.sub("", value)


def is_dialable(number: str) -> bool:
    """A number in E.164 form with 7 to 15 digits, exactly as written."""
    return re.fullmatch(E164_PATTERN, number) is not None


def check_e164(value: str) -> str:
    compact = normalize_phone(value)
    if not _E164.fullmatch(compact):
        raise ValueError(
            f"{value!r} is not a phone number in E.164 format: a '+', the country code and the number, "
            "up to 15 digits, e.g. +4930123456"
        )
    return compact


E164 = Annotated[
    str, Field(min_length=3, max_length=25, examples=["+4930123456"]), AfterValidator(check_e164)
]


def check_e164_target(value: Any) -> Any:
    """A transfer target must be dialable as written: refused with a sentence a person understands."""
    if isinstance(value, str) and not is_dialable(value):
        raise ValueError(
            f"{value[:40]!r} is not a phone number in E.164 form: a +, the country code and the number, "
            "digits only, at most 15 digits (e.g. +4930123456)"
        )
    return value


# A transfer target as a field type (flows' transfer nodes, the transfer tool's settings).
E164Target = Annotated[
    str, Field(pattern=E164_PATTERN, examples=["+4930123456"]), BeforeValidator(check_e164_target)
]
