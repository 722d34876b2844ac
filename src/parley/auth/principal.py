from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from parley.auth.roles import Role

API_KEY_SCOPES = ("read", "write", "admin")
_SCOPE_ROLE = {"admin": Role.admin, "write": Role.member, "read": Role.viewer}


def scopes_role(scopes: Iterable[str]) -> Role:
    """The strongest role a set of API-key scopes grants (viewer when none)."""
    roles = [_SCOPE_ROLE[s] for s in scopes if s in _SCOPE_ROLE]
    return max(roles, key=lambda r: r.rank) if roles else Role.viewer


@dataclass(frozen=True)
class Principal:
    """Who is calling: a user (from a JWT), an organization's API key, a short-lived stream token, or
    the platform itself acting for an organization (``system``: a verified webhook, a job, the seed;
    ``id`` names its actor)."""

    kind: Literal["user", "api_key", "stream", "system"]
    id: str
    subject: str | None = None
    email: str | None = None
    name: str | None = None
    is_platform_admin: bool = False
    api_key_organization_id: str | None = None
    scopes: frozenset[str] = frozenset()

    @property
    def is_user(self) -> bool:
        return self.kind == "user"

    def api_key_role(self) -> Role:
        """The strongest role an API key's scopes grant."""
        return scopes_role(self.scopes)


@dataclass(frozen=True)
class OrgContext:
    """The active organization of a request and the caller's role in it."""

    organization_id: str
    role: Role
    principal: Principal

    @property
    def actor_user_id(self) -> str | None:
        return self.principal.id if self.principal.is_user else None
