from __future__ import annotations

from datetime import datetime
from zoneinfo import available_timezones

from pydantic import BaseModel, ConfigDict, Field, field_validator

from parley.auth.roles import Role
from parley.kit.schemas import StrictModel

_SLUG = r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$"


def _check_timezone(value: str | None) -> str | None:
    if value is not None and value not in available_timezones():
        raise ValueError("must be an IANA time zone such as Europe/Berlin")
    return value


class OrganizationCreate(StrictModel):
    name: str = Field(min_length=1, max_length=200, examples=["Autohaus Demo"])
    slug: str | None = Field(
        default=None, pattern=_SLUG, description="URL-friendly handle; derived from name."
    )
    timezone: str = Field(default="Europe/Berlin", max_length=64)
    default_language: str = Field(default="de", pattern=r"^[a-z]{2}(-[A-Z]{2})?$")

    _tz = field_validator("timezone")(_check_timezone)


class OrganizationUpdate(StrictModel):
    name: str | None = Field(default=None, min_length=1, max_length=200)
    slug: str | None = Field(default=None, pattern=_SLUG)
    timezone: str | None = Field(default=None, max_length=64)
    default_language: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[A-Z]{2})?$")

    _tz = field_validator("timezone")(_check_timezone)


class OrganizationOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    slug: str
    timezone: str
    default_language: str
    avatar_url: str | None
    created_at: datetime
    updated_at: datetime
    role: Role | None = Field(default=None, description="The caller's role in this organization.")


class MemberAdd(StrictModel):
    subject: str = Field(min_length=1, max_length=255, description="The person's identity-provider subject.")
    email: str | None = Field(default=None, max_length=320)
    name: str | None = Field(default=None, max_length=200)
    role: Role = Role.member


class MemberUpdate(StrictModel):
    role: Role


class MemberOut(BaseModel):
    user_id: str
    subject: str
    email: str | None
    name: str | None
    role: Role
    joined_at: datetime
