"""Schema bases every domain shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Request bodies refuse unknown fields, so nobody can smuggle in organization_id or roles."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class DeletedOut(BaseModel):
    id: str
    deleted: bool = True
