from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from parley.kit.schemas import StrictModel

MAX_ITEM_BYTES = 64 * 1024
MAX_BATCH = 1000
_TAG = re.compile(r"^\w[\w .:/-]{0,59}$")


def clean_tags(tags: list[str]) -> list[str]:
    cleaned = sorted({tag.strip() for tag in tags})
    for tag in cleaned:
        if not _TAG.fullmatch(tag):
            raise ValueError(
                "a tag has 1-60 letters, digits, spaces or . : / - _ and starts with a letter or digit"
            )
    return cleaned


def check_item_size(data: dict[str, Any]) -> dict[str, Any]:
    size = len(orjson.dumps(data))
    if size > MAX_ITEM_BYTES:
        raise ValueError(f"an item may have at most {MAX_ITEM_BYTES} bytes of JSON; this one has {size}")
    return data


class DatasetCreate(StrictModel):
    name: str = Field(min_length=1, max_length=200, examples=["Where is my car – regression"])
    description: str | None = Field(default=None, max_length=5000)
    tags: list[str] = Field(default_factory=list, max_length=20)

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: list[str]) -> list[str]:
        return clean_tags(tags)


class DatasetUpdate(StrictModel):
    """Every field is optional; omitted fields keep their value, ``description: null`` clears it."""

    name: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=5000)
    tags: list[str] | None = Field(default=None, max_length=20)

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: list[str] | None) -> list[str] | None:
        return clean_tags(tags) if tags is not None else None


class DatasetOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    name: str
    description: str | None
    tags: list[str]
    item_count: int
    created_at: datetime
    updated_at: datetime
    created_by: str | None


class DatasetItemIn(StrictModel):
    data: dict[str, Any] = Field(
        description='Any JSON object, e.g. {"input": "Wo ist mein Auto?", "expected": "..."} (at most 64 kB).',
        examples=[{"input": "Wo ist mein Auto? Auftrag 4711", "expected": "Ihr Auto ist fertig."}],
    )

    _size = field_validator("data")(check_item_size)


class DatasetItemsCreate(StrictModel):
    """One item as ``{"data": {...}}`` or a batch as ``{"items": [{"data": {...}}, ...]}``."""

    data: dict[str, Any] | None = Field(default=None, description="One item's JSON object.")
    items: list[DatasetItemIn] | None = Field(default=None, min_length=1, max_length=MAX_BATCH)

    _size = field_validator("data")(lambda v: check_item_size(v) if v is not None else None)

    @model_validator(mode="after")
    def _one_of(self) -> DatasetItemsCreate:
        if (self.data is None) == (self.items is None):
            raise ValueError("send either data (one item) or items (a batch)")
        return self

    def all_data(self) -> list[dict[str, Any]]:
        if self.data is not None:
            return [self.data]
        return [item.data for item in self.items or []]


class DatasetItemOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    dataset_id: str
    data: dict[str, Any]
    created_at: datetime


class DatasetItemsCreated(BaseModel):
    items: list[DatasetItemOut]


class ImportProblem(BaseModel):
    line: int = Field(description="1-based line of the file.")
    message: str


class DatasetImportOut(BaseModel):
    imported: int = Field(description="Items added; 0 when the file had errors and skip_invalid was false.")
    skipped: int = Field(description="Invalid rows left out (with skip_invalid=true).")
    format: str = Field(description="csv or jsonl, as recognised from the content.")
    errors: list[ImportProblem]
