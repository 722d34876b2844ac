"""Schema bases and field types every domain shares."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

# How serious a brain signal is: the scale of a flow's signal node (parley.flows.definition.SignalNode),
# of the built-in rules and of notification rules' minimum.
Severity = Literal["info", "low", "medium", "high", "critical"]


class StrictModel(BaseModel):
    """Request bodies refuse unknown fields, so nobody can smuggle in organization_id or roles."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class DeletedOut(BaseModel):
    id: str
    deleted: bool = True


# Phone numbers as telephony and the calls API take them: spaces, dots, dashes and brackets are dropped.
_E164 = re.compile(r"^\+[1-9][0-9]{1,14}$")


def check_e164(value: str) -> str:
    compact = re.sub(r"[\s().-]", "", value)
    if not _E164.fullmatch(compact):
        raise ValueError(
            f"{value!r} is not a phone number in E.164 format: a '+', the country code and the number, "
            "up to 15 digits, e.g. +4930123456"
        )
    return compact


E164 = Annotated[
    str, Field(min_length=3, max_length=25, examples=["+4930123456"]), AfterValidator(check_e164)
]


# Transfer targets are dialled as written: no characters are dropped, 7 to 15 digits.
E164_PATTERN = r"^\+[1-9][0-9]{6,14}$"


def check_e164_target(value: Any) -> Any:
    """A transfer target must be dialable as written: refused with a sentence a person understands."""
    if isinstance(value, str) and not re.fullmatch(E164_PATTERN, value):
        raise ValueError(
            f"{value[:40]!r} is not a phone number in E.164 form: a +, the country code and the number, "
            "digits only, at most 15 digits (e.g. +4930123456)"
        )
    return value
