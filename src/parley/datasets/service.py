"""Datasets and their items. Never commits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import Select, delete, exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.auth.principal import OrgContext
from parley.datasets.models import Dataset, DatasetItem, DatasetTag
from parley.datasets.schemas import DatasetCreate, DatasetOut, DatasetUpdate
from parley.kit.errors import Conflict, NotFound, Unprocessable
from parley.kit.ids import new_id
from parley.kit.tenancy import get_owned, scoped


class InvalidItems(Unprocessable):
    """Items a dataset with a role of its own refuses; ``problems`` are (0-based index, message)."""

    def __init__(self, detail: str, problems: list[tuple[int, str]]) -> None:
        super().__init__(detail)
        self.problems = problems


# Checks that other domains hook in for datasets with a role of their own (evaluation suites accept
# only valid scenarios); each answers the items as they are to be stored, or raises InvalidItems.
ItemCheck = Callable[[AsyncSession, Dataset, list[dict[str, Any]]], Awaitable[list[dict[str, Any]]]]
item_checks: list[ItemCheck] = []


async def _count_items(session: AsyncSession, dataset_ids: list[str]) -> dict[str, int]:
    if not dataset_ids:
        return {}
    rows = await session.execute(
        select(DatasetItem.dataset_id, func.count())
        .where(DatasetItem.dataset_id.in_(dataset_ids))
        .group_by(DatasetItem.dataset_id)
    )
    return {str(row[0]): int(row[1]) for row in rows}


async def to_out_many(session: AsyncSession, datasets: list[Dataset]) -> list[DatasetOut]:
    counts = await _count_items(session, [d.id for d in datasets])
    return [
        DatasetOut(
            id=d.id,
            name=d.name,
            description=d.description,
            tags=d.tags,
            item_count=counts.get(d.id, 0),
            created_at=d.created_at,
            updated_at=d.updated_at,
            created_by=d.created_by,
        )
        for d in datasets
    ]


async def to_out(session: AsyncSession, dataset: Dataset) -> DatasetOut:
    return (await to_out_many(session, [dataset]))[0]


async def _check_name_free(
    session: AsyncSession, organization_id: str, name: str, own_id: str | None
) -> None:
    stmt = scoped(Dataset, organization_id).where(Dataset.name == name)
    if own_id is not None:
        stmt = stmt.where(Dataset.id != own_id)
    if await session.scalar(select(exists(stmt.subquery()))):
        raise Conflict(f"A dataset named {name!r} already exists in this organization.")


def dataset_query(organization_id: str, tag: str | None) -> Any:
    stmt = scoped(Dataset, organization_id)
    if tag is not None:
        stmt = stmt.where(exists().where(DatasetTag.dataset_id == Dataset.id, DatasetTag.tag == tag.strip()))
    return stmt


async def create_dataset(session: AsyncSession, context: OrgContext, data: DatasetCreate) -> Dataset:
    await _check_name_free(session, context.organization_id, data.name, None)
    dataset = Dataset(
        id=new_id("ds"),
        organization_id=context.organization_id,
        name=data.name,
        description=data.description,
        created_by=context.actor_user_id,
        tag_rows=[DatasetTag(tag=tag) for tag in data.tags],
    )
    session.add(dataset)
    await session.flush()
    return dataset


async def get_dataset(session: AsyncSession, organization_id: str, dataset_id: str) -> Dataset:
    return await get_owned(session, Dataset, dataset_id, organization_id, "Dataset")


async def update_dataset(
    session: AsyncSession, organization_id: str, dataset_id: str, data: DatasetUpdate
) -> Dataset:
    dataset = await get_dataset(session, organization_id, dataset_id)
    given = data.model_fields_set
    if "name" in given and data.name is not None and data.name != dataset.name:
        await _check_name_free(session, organization_id, data.name, dataset.id)
        dataset.name = data.name
    if "description" in given:
        dataset.description = data.description
    if "tags" in given and data.tags is not None:
        current = {row.tag: row for row in dataset.tag_rows}
        dataset.tag_rows = [current.get(tag) or DatasetTag(tag=tag) for tag in data.tags]
    await session.flush()
    await session.refresh(dataset)
    return dataset


async def delete_dataset(session: AsyncSession, organization_id: str, dataset_id: str) -> Dataset:
    dataset = await get_dataset(session, organization_id, dataset_id)
    await session.execute(delete(DatasetItem).where(DatasetItem.dataset_id == dataset.id))
    await session.delete(dataset)
    await session.flush()
    return dataset


async def add_items(
    session: AsyncSession, organization_id: str, dataset: Dataset, items: list[dict[str, Any]]
) -> list[DatasetItem]:
    for item_check in item_checks:
        items = await item_check(session, dataset, items)
    rows = [
        DatasetItem(id=new_id("dsi"), organization_id=organization_id, dataset_id=dataset.id, data=data)
        for data in items
    ]
    session.add_all(rows)
    await session.flush()
    return rows


async def get_item(session: AsyncSession, organization_id: str, dataset_id: str, item_id: str) -> DatasetItem:
    item = await get_owned(session, DatasetItem, item_id, organization_id, "Dataset item")
    if item.dataset_id != dataset_id:
        await get_dataset(session, organization_id, dataset_id)  # a missing dataset is named first
        raise NotFound(f"Dataset item {item_id!r} was not found in this dataset.")
    return item


def items_query(organization_id: str, dataset_id: str) -> Select[DatasetItem]:
    return scoped(DatasetItem, organization_id).where(DatasetItem.dataset_id == dataset_id)
