"""Roles a member holds in an organization, and what an API key's scopes grant.

They live in ``auth`` because every authorization decision reads them; ``organizations`` stores them.
"""

from __future__ import annotations

import enum


class Role(enum.StrEnum):
    owner = "owner"
    admin = "admin"
    member = "member"
    viewer = "viewer"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def at_least(self, other: Role) -> bool:
        return self.rank >= other.rank


_RANK = {Role.viewer: 0, Role.member: 1, Role.admin: 2, Role.owner: 3}
