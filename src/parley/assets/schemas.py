from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from parley.assets.sniff import AssetKind


class AssetOut(BaseModel):
    id: str
    name: str
    kind: AssetKind
    content_type: str = Field(description="Detected from the file's bytes, not from its name.")
    size: int = Field(description="Size in bytes.")
    sha256: str
    original_filename: str | None = Field(description="The uploaded file's name, as metadata only.")
    url: str = Field(description="Where the content is served (authenticated).")
    created_by: str | None
    created_at: datetime


class AvatarOut(BaseModel):
    asset_id: str
    url: str
    width: int
    height: int
    content_type: Literal["image/png", "image/jpeg", "image/webp"]
