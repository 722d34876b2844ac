"""Organization rules: creation (caller becomes owner), updates, deletion and membership changes."""

from __future__ import annotations

import re
import unicodedata

import structlog
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.models import Membership, Organization, User
from parley.auth.principal import Principal
from parley.auth.roles import Role
from parley.kit.blobs import BlobStore, BlobStoreError
from parley.kit.db import Base, after_commit, utcnow
from parley.kit.errors import Conflict, Forbidden, NotFound
from parley.kit.ids import new_id
from parley.organizations.schemas import MemberAdd, MemberOut, OrganizationCreate, OrganizationUpdate

log = structlog.get_logger("parley.organizations")


def slugify(name: str) -> str:
    ascii_name = unicodedata.normalize("NFKD", name.replace("ß", "ss")).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:60].strip("-")
    return slug or "org"


async def _unique_slug(session: AsyncSession, base: str) -> str:
    taken = set(
        (await session.scalars(select(Organization.slug).where(Organization.slug.like(f"{base}%")))).all()
    )
    if base not in taken:
        return base
    suffix = 2
    while f"{base}-{suffix}" in taken:
        suffix += 1
    return f"{base}-{suffix}"


async def create_organization(
    session: AsyncSession, user: Principal, data: OrganizationCreate
) -> Organization:
    if data.slug is not None:
        if await session.scalar(select(Organization.id).where(Organization.slug == data.slug)):
            raise Conflict(f"The slug {data.slug!r} is taken; choose another.")
        slug = data.slug
    else:
        slug = await _unique_slug(session, slugify(data.name))
    org = Organization(
        id=new_id("org"),
        name=data.name,
        slug=slug,
        timezone=data.timezone,
        default_language=data.default_language,
    )
    session.add(org)
    await session.flush()
    session.add(Membership(id=new_id("mem"), organization_id=org.id, user_id=user.id, role=Role.owner.value))
    await session.flush()
    return org


async def list_user_organizations(session: AsyncSession, user_id: str) -> list[tuple[Organization, str]]:
    rows = await session.execute(
        select(Organization, Membership.role)
        .join(Membership, Membership.organization_id == Organization.id)
        .where(Membership.user_id == user_id)
        .order_by(Organization.id.desc())
    )
    return [(org, role) for org, role in rows.all()]


async def get_organization(session: AsyncSession, organization_id: str) -> Organization:
    org = await session.get(Organization, organization_id)
    if org is None:
        raise NotFound(f"Organization {organization_id!r} was not found.")
    return org


async def update_organization(
    session: AsyncSession, org: Organization, data: OrganizationUpdate
) -> Organization:
    changes = data.model_dump(exclude_unset=True, exclude_none=True)
    if "slug" in changes and changes["slug"] != org.slug:
        clash = await session.scalar(select(Organization.id).where(Organization.slug == changes["slug"]))
        if clash:
            raise Conflict(f"The slug {changes['slug']!r} is taken; choose another.")
    for field, value in changes.items():
        setattr(org, field, value)
    org.updated_at = utcnow()
    await session.flush()
    return org


# Kept after an organization is deleted: the audit trail of what happened in it.
_RETAINED_TABLES = frozenset({"audit_events"})


async def delete_organization(session: AsyncSession, org: Organization, blobs: BlobStore) -> None:
    """Delete the organization with every row it owns; its stored files go once the delete commits."""
    from parley.knowledge.repository import unindex_organization

    tables = [
        t for t in Base.metadata.sorted_tables if "organization_id" in t.c and t.name not in _RETAINED_TABLES
    ]
    blob_keys: list[str] = []
    for table in tables:
        if "blob_key" in table.c:
            keys = await session.scalars(select(table.c.blob_key).where(table.c.organization_id == org.id))
            blob_keys += [key for key in keys if key]
    await unindex_organization(session, org.id)
    for table in reversed(tables):  # children before the rows they reference
        await session.execute(delete(table).where(table.c.organization_id == org.id))
    await session.delete(org)
    await session.flush()

    async def remove_files() -> None:
        for key in blob_keys:
            try:
                await blobs.delete(key)
            except BlobStoreError:
                log.warning("organization_blob_not_removed", organization_id=org.id)

    after_commit(session, remove_files)


async def list_members(session: AsyncSession, organization_id: str) -> list[MemberOut]:
    rows = await session.execute(
        select(User, Membership)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.organization_id == organization_id)
        .order_by(Membership.id)
    )
    return [
        MemberOut(
            user_id=user.id,
            subject=user.subject,
            email=user.email,
            name=user.name,
            role=Role(membership.role),
            joined_at=membership.created_at,
        )
        for user, membership in rows.all()
    ]


def _check_can_grant(actor_role: Role, role: Role) -> None:
    if role == Role.owner and actor_role != Role.owner:
        raise Forbidden("Only owners can make someone an owner.")


async def add_member(
    session: AsyncSession, organization_id: str, actor_role: Role, data: MemberAdd
) -> MemberOut:
    _check_can_grant(actor_role, data.role)
    user = await session.scalar(select(User).where(User.subject == data.subject))
    if user is None:
        # The person has not signed in yet; their row is completed from the token on first request.
        user = User(id=new_id("usr"), subject=data.subject, email=data.email, name=data.name)
        session.add(user)
        await session.flush()
    existing = await session.scalar(
        select(Membership).where(Membership.organization_id == organization_id, Membership.user_id == user.id)
    )
    if existing is not None:
        raise Conflict(
            f"{data.subject!r} is already a member (role {existing.role}); change the role instead."
        )
    membership = Membership(
        id=new_id("mem"), organization_id=organization_id, user_id=user.id, role=data.role.value
    )
    session.add(membership)
    await session.flush()
    return MemberOut(
        user_id=user.id,
        subject=user.subject,
        email=user.email,
        name=user.name,
        role=data.role,
        joined_at=membership.created_at,
    )


async def _membership(session: AsyncSession, organization_id: str, user_id: str) -> Membership:
    membership = await session.scalar(
        select(Membership).where(Membership.organization_id == organization_id, Membership.user_id == user_id)
    )
    if membership is None:
        raise NotFound(f"User {user_id!r} is not a member of this organization.")
    return membership


async def _owner_count(session: AsyncSession, organization_id: str) -> int:
    count = await session.scalar(
        select(func.count())
        .select_from(Membership)
        .where(Membership.organization_id == organization_id, Membership.role == Role.owner.value)
    )
    return int(count or 0)


async def change_member_role(
    session: AsyncSession, organization_id: str, actor_role: Role, user_id: str, role: Role
) -> Membership:
    membership = await _membership(session, organization_id, user_id)
    current = Role(membership.role)
    _check_can_grant(actor_role, role)
    if current == Role.owner and actor_role != Role.owner:
        raise Forbidden("Only owners can change an owner's role.")
    if current == Role.owner and role != Role.owner and await _owner_count(session, organization_id) <= 1:
        raise Conflict("An organization needs at least one owner; make someone else owner first.")
    membership.role = role.value
    membership.updated_at = utcnow()
    await session.flush()
    return membership


async def remove_member(session: AsyncSession, organization_id: str, actor_role: Role, user_id: str) -> None:
    membership = await _membership(session, organization_id, user_id)
    if membership.role == Role.owner.value:
        if actor_role != Role.owner:
            raise Forbidden("Only owners can remove an owner.")
        if await _owner_count(session, organization_id) <= 1:
            raise Conflict("The last owner cannot be removed; make someone else owner first.")
    await session.delete(membership)
    await session.flush()
