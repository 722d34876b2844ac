"""Seeding the demo organization: idempotent, so ``parley up`` can run it on every start.

It makes sure that the owner exists, owns an organization "Autohaus Demo", that the organization has an
``order_lookup`` tool pointing at the order connector with the given key, and that the order-status
agent is published in German and in English, with a test suite of scenarios for it (see
:mod:`parley.demo.suite`). Existing pieces are reused; only what is missing or out of date is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.identity import user_context
from parley.auth.models import Membership, Organization, User
from parley.auth.principal import OrgContext
from parley.auth.roles import Role
from parley.config import Settings
from parley.datasets import service as datasets
from parley.datasets.models import Dataset, DatasetItem
from parley.datasets.schemas import DatasetCreate
from parley.demo.flows import order_status_flow
from parley.demo.suite import SUITE_NAME, demo_scenarios
from parley.evaluations import service as evaluations
from parley.evaluations.scenarios import parse_items
from parley.evaluations.schemas import SuiteIn
from parley.flows import service as flows
from parley.flows.models import Flow
from parley.flows.schemas import FlowCreate, FlowUpdate
from parley.kit.db import Database, unit_of_work
from parley.kit.ids import new_id
from parley.tools import service as tools
from parley.tools.models import Tool
from parley.tools.schemas import ToolCreate, ToolUpdate

DEMO_SLUG = "autohaus-demo"
DEMO_FLOWS = {"de": "Auftragsstatus", "en": "Order status"}


@dataclass
class SeedResult:
    organization_id: str
    tool_id: str
    flow_ids: dict[str, str]
    suite_id: str = ""


async def _owner(session: AsyncSession, subject: str) -> User:
    user = await session.scalar(select(User).where(User.subject == subject))
    if user is None:
        user = User(id=new_id("usr"), subject=subject, name="Demo owner")
        session.add(user)
        await session.flush()
    return user


async def _organization(session: AsyncSession, user: User) -> Organization:
    org = await session.scalar(
        select(Organization)
        .join(Membership, Membership.organization_id == Organization.id)
        .where(Membership.user_id == user.id, Organization.name == "Autohaus Demo")
        .order_by(Organization.id)
        .limit(1)
    )
    if org is not None:
        return org
    taken = await session.scalar(select(Organization.id).where(Organization.slug == DEMO_SLUG))
    org = Organization(
        id=new_id("org"),
        name="Autohaus Demo",
        slug=DEMO_SLUG if taken is None else f"{DEMO_SLUG}-{user.id[-6:].lower()}",
        timezone="Europe/Berlin",
        default_language="de",
    )
    session.add(org)
    await session.flush()
    session.add(Membership(id=new_id("mem"), organization_id=org.id, user_id=user.id, role=Role.owner.value))
    await session.flush()
    return org


async def _tool(
    session: AsyncSession, settings: Settings, context: OrgContext, connector_url: str, connector_key: str
) -> Tool:
    tool = await session.scalar(
        select(Tool).where(Tool.organization_id == context.organization_id, Tool.name == "order_lookup")
    )
    config = {"connector_url": connector_url}
    if tool is None:
        data = ToolCreate(
            name="order_lookup",
            description="Looks up a repair order in the shop system by its number.",
            type="order_lookup",
            config=config,
            secrets={"api_key": connector_key},
        )
        return await tools.create_tool(session, settings, context, data)
    update = ToolUpdate(config=config, secrets={"api_key": connector_key})
    return await tools.update_tool(session, settings, context.organization_id, tool.id, update)


async def _published_flow(session: AsyncSession, context: OrgContext, language: str) -> Flow:
    name = DEMO_FLOWS[language]
    definition = order_status_flow(language)
    flow = await session.scalar(
        select(Flow).where(Flow.organization_id == context.organization_id, Flow.name == name)
    )
    if flow is None:
        flow = await flows.create_flow(
            session,
            context,
            FlowCreate.model_validate(
                {
                    "name": name,
                    "description": "Tells callers the status of their repair.",
                    "definition": definition,
                }
            ),
        )
    else:
        flow = await flows.update_flow(
            session, context.organization_id, flow.id, FlowUpdate.model_validate({"definition": definition})
        )
    if flow.published_hash != flow.definition_hash:  # only a changed draft becomes a new version
        await flows.publish(session, context, flow.id, notes="demo seed")
    return flow


async def _suite(session: AsyncSession, context: OrgContext, flow_id: str) -> Dataset:
    """The order-status suite, its scenarios replaced only when they changed."""
    dataset = await session.scalar(
        select(Dataset).where(Dataset.organization_id == context.organization_id, Dataset.name == SUITE_NAME)
    )
    if dataset is None:
        data = DatasetCreate(
            name=SUITE_NAME, description="Scenarios the order-status agents must pass.", tags=["demo"]
        )
        dataset = await datasets.create_dataset(session, context, data)
    await evaluations.put_suite(session, context.organization_id, dataset.id, SuiteIn(flow_id=flow_id))
    wanted, _ = parse_items(demo_scenarios(), None)
    items = list(await session.scalars(select(DatasetItem).where(DatasetItem.dataset_id == dataset.id)))
    key = sorted(str(sorted(d.items())) for d in wanted)
    if sorted(str(sorted(i.data.items())) for i in items) != key:
        for item in items:
            await session.delete(item)
        await session.flush()
        await datasets.add_items(session, context.organization_id, dataset, wanted)
    return dataset


async def seed_demo(
    session: AsyncSession, settings: Settings, *, owner_subject: str, connector_url: str, connector_key: str
) -> SeedResult:
    user = await _owner(session, owner_subject)
    org = await _organization(session, user)
    # The seed acts as the owner it just made; the membership was written above, not looked up.
    context = user_context(org.id, Role.owner, user_id=user.id, subject=owner_subject)
    tool = await _tool(session, settings, context, connector_url, connector_key)
    flow_ids = {language: (await _published_flow(session, context, language)).id for language in DEMO_FLOWS}
    suite = await _suite(session, context, flow_ids["de"])
    return SeedResult(org.id, tool.id, flow_ids, suite.id)


async def run_seed(
    settings: Settings, *, owner_subject: str, connector_url: str, connector_key: str
) -> SeedResult:
    """Seed in one transaction of its own."""
    database = Database.from_url(settings.resolved_database_url, pool_size=1)
    try:
        async with unit_of_work(database) as session:
            result = await seed_demo(
                session,
                settings,
                owner_subject=owner_subject,
                connector_url=connector_url,
                connector_key=connector_key,
            )
        return result
    finally:
        await database.dispose()
