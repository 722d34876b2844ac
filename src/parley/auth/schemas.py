"""What /api/me answers."""

from __future__ import annotations

from pydantic import BaseModel

from parley.auth.roles import Role


class MembershipOut(BaseModel):
    organization_id: str
    organization_name: str
    role: Role


class MeOut(BaseModel):
    kind: str
    id: str
    subject: str | None
    email: str | None
    name: str | None
    is_platform_admin: bool
    scopes: list[str]
    memberships: list[MembershipOut]
