from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import Path, Query, Request
from fastapi.exceptions import RequestValidationError
from starlette.datastructures import UploadFile

from parley.audit.dependencies import describe
from parley.auth.dependencies import OrgReader, OrgWriter
from parley.datasets import service
from parley.datasets.importing import parse_file
from parley.datasets.models import Dataset, DatasetItem
from parley.datasets.schemas import (
    DatasetCreate,
    DatasetImportOut,
    DatasetItemOut,
    DatasetItemsCreate,
    DatasetItemsCreated,
    DatasetOut,
    DatasetUpdate,
    ImportProblem,
)
from parley.kit.body import ParsedBody
from parley.kit.db import DbSession
from parley.kit.errors import PayloadTooLarge, Unprocessable, UnsupportedMediaType, documented
from parley.kit.pagination import Page, Pagination, paginate
from parley.kit.routing import ParleyRouter
from parley.kit.schemas import DeletedOut

router = ParleyRouter(prefix="/api/datasets", tags=["Datasets"])

DatasetId = Annotated[str, Path(alias="datasetId", max_length=40, description="Dataset id (ds_...).")]
ItemId = Annotated[str, Path(alias="itemId", max_length=40, description="Dataset item id (dsi_...).")]

MAX_IMPORT_BYTES = 10 * 1024 * 1024
MAX_REPORTED_ERRORS = 1000
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}
_REF = "#/components/schemas/{}"

IMPORT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "CSV (header row; ',' or ';') or JSONL (one object a line), ≤ 10 MB.",
                        },
                        "skip_invalid": {"type": "boolean", "description": "Same as the query parameter."},
                    },
                }
            }
        },
    }
}
IMPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    **documented(413, 415),
    422: {
        "description": "No file, an empty file or invalid fields.",
        "content": {
            "application/json": {
                "schema": {
                    "anyOf": [
                        {"$ref": _REF.format("ErrorBody")},
                        {"$ref": _REF.format("HTTPValidationError")},
                    ]
                }
            }
        },
    },
}


@router.post("", summary="Create Dataset", response_model=DatasetOut, responses=documented(409))
async def create_dataset(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    data: Annotated[DatasetCreate, ParsedBody(DatasetCreate)],
) -> DatasetOut:
    dataset = await service.create_dataset(session, context, data)
    describe(request, "dataset", dataset.id)
    return await service.to_out(session, dataset)


@router.get("", summary="List Datasets", response_model=Page[DatasetOut])
async def list_datasets(
    session: DbSession,
    context: OrgReader,
    page: Pagination,
    tag: Annotated[str | None, Query(max_length=60, description="Only datasets with this tag.")] = None,
) -> Page[DatasetOut]:
    rows, cursor = await paginate(
        session, service.dataset_query(context.organization_id, tag), Dataset.id, page
    )
    return Page[DatasetOut](items=await service.to_out_many(session, rows), next_cursor=cursor)


@router.get("/{datasetId}", summary="Get Dataset", response_model=DatasetOut)
async def get_dataset(session: DbSession, context: OrgReader, dataset_id: DatasetId) -> DatasetOut:
    return await service.to_out(
        session, await service.get_dataset(session, context.organization_id, dataset_id)
    )


@router.patch("/{datasetId}", summary="Update Dataset", response_model=DatasetOut, responses=documented(409))
async def update_dataset(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    dataset_id: DatasetId,
    data: Annotated[DatasetUpdate, ParsedBody(DatasetUpdate)],
) -> DatasetOut:
    """Change the name, description or tags; omitted fields stay as they are, tags are replaced whole."""
    dataset = await service.update_dataset(session, context.organization_id, dataset_id, data)
    describe(request, "dataset", dataset.id, fields=sorted(data.model_fields_set))
    return await service.to_out(session, dataset)


@router.delete("/{datasetId}", summary="Delete Dataset", response_model=DeletedOut)
async def delete_dataset(
    request: Request, session: DbSession, context: OrgWriter, dataset_id: DatasetId
) -> DeletedOut:
    """Delete the dataset and all of its items."""
    dataset = await service.delete_dataset(session, context.organization_id, dataset_id)
    describe(request, "dataset", dataset.id)
    return DeletedOut(id=dataset.id)


# A test suite's items that are not valid scenarios are a 422 with a sentence (ErrorBody).
ITEMS_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {**IMPORT_RESPONSES[422], "description": "Invalid fields, or items a test suite does not accept."}
}


@router.post(
    "/{datasetId}/items",
    summary="Create Dataset Items",
    response_model=DatasetItemsCreated,
    responses=ITEMS_RESPONSES,
)
async def create_dataset_items(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    dataset_id: DatasetId,
    data: Annotated[DatasetItemsCreate, ParsedBody(DatasetItemsCreate)],
) -> DatasetItemsCreated:
    """Add one item (``{"data": {...}}``) or a batch (``{"items": [{"data": {...}}, ...]}``, up to 1,000).
    Items are any JSON object of at most 64 kB; for evaluating flows use
    ``{"input": "...", "expected": "..."}``."""
    dataset = await service.get_dataset(session, context.organization_id, dataset_id)
    rows = await service.add_items(session, context.organization_id, dataset, data.all_data())
    describe(request, "dataset", dataset.id, items=len(rows))
    return DatasetItemsCreated(items=[DatasetItemOut.model_validate(row) for row in rows])


@router.get("/{datasetId}/items", summary="List Dataset Items", response_model=Page[DatasetItemOut])
async def list_dataset_items(
    session: DbSession, context: OrgReader, dataset_id: DatasetId, page: Pagination
) -> Page[DatasetItemOut]:
    dataset = await service.get_dataset(session, context.organization_id, dataset_id)
    stmt = service.items_query(context.organization_id, dataset.id)
    rows, cursor = await paginate(session, stmt, DatasetItem.id, page)
    return Page[DatasetItemOut](items=[DatasetItemOut.model_validate(r) for r in rows], next_cursor=cursor)


@router.get("/{datasetId}/items/{itemId}", summary="Get Dataset Item", response_model=DatasetItemOut)
async def get_dataset_item(
    session: DbSession, context: OrgReader, dataset_id: DatasetId, item_id: ItemId
) -> DatasetItemOut:
    return DatasetItemOut.model_validate(
        await service.get_item(session, context.organization_id, dataset_id, item_id)
    )


@router.delete("/{datasetId}/items/{itemId}", summary="Delete Dataset Item", response_model=DeletedOut)
async def delete_dataset_item(
    request: Request, session: DbSession, context: OrgWriter, dataset_id: DatasetId, item_id: ItemId
) -> DeletedOut:
    item = await service.get_item(session, context.organization_id, dataset_id, item_id)
    await session.delete(item)
    await session.flush()
    describe(request, "dataset_item", item.id)
    return DeletedOut(id=item.id)


def _flag(value: Any) -> bool:
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise RequestValidationError(
        [
            {
                "type": "bool_parsing",
                "loc": ("body", "skip_invalid"),
                "msg": "Input should be a valid boolean",
                "input": str(value),
            }
        ]
    )


@router.post(
    "/{datasetId}/import",
    summary="Import Dataset Items",
    response_model=DatasetImportOut,
    responses=IMPORT_RESPONSES,
    openapi_extra=IMPORT_BODY,
)
async def import_dataset_items(
    request: Request,
    session: DbSession,
    context: OrgWriter,
    dataset_id: DatasetId,
    skip_invalid: Annotated[
        bool, Query(description="Import the valid rows even when some are invalid (default: all or nothing).")
    ] = False,
) -> DatasetImportOut:
    """Import items from a CSV file (header row; ``,`` or ``;``; UTF-8 with or without BOM, or
    Windows-1252) — each row becomes ``{column: value}`` — or a JSONL file (one JSON object a line).
    Invalid rows are reported with their line; unless ``skip_invalid=true`` nothing is imported then."""
    dataset = await service.get_dataset(session, context.organization_id, dataset_id)
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type != "multipart/form-data":
        raise UnsupportedMediaType("Send the file as multipart/form-data in the field 'file'.")
    form = await request.form()
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise RequestValidationError(
            [{"type": "missing", "loc": ("body", "file"), "msg": "Field required", "input": None}]
        )
    extra = [key for key in form if key not in ("file", "skip_invalid")]
    if extra:
        raise RequestValidationError(
            [
                {
                    "type": "extra_forbidden",
                    "loc": ("body", k),
                    "msg": "Extra inputs are not permitted",
                    "input": None,
                }
                for k in extra
            ]
        )
    if "skip_invalid" in form:
        skip_invalid = _flag(form.get("skip_invalid"))
    data = await upload.read(MAX_IMPORT_BYTES + 1)
    if len(data) > MAX_IMPORT_BYTES:
        raise PayloadTooLarge(f"Import files may have at most {MAX_IMPORT_BYTES} bytes.")
    if not data.strip():
        raise Unprocessable("The uploaded file is empty.", loc=("body", "file"))
    parsed = await asyncio.to_thread(parse_file, data, upload.filename)
    errors = [
        ImportProblem(line=line, message=message) for line, message in parsed.errors[:MAX_REPORTED_ERRORS]
    ]
    if parsed.errors and not skip_invalid:
        return DatasetImportOut(imported=0, skipped=0, format=parsed.format, errors=errors)
    valid = parsed.rows
    try:
        rows = await service.add_items(session, context.organization_id, dataset, [row for _, row in valid])
    except service.InvalidItems as exc:  # e.g. a test suite's rows that are not valid scenarios
        refused = {index for index, _ in exc.problems}
        parsed.errors = sorted(parsed.errors + [(valid[i][0], message) for i, message in exc.problems])
        errors = [
            ImportProblem(line=line, message=message) for line, message in parsed.errors[:MAX_REPORTED_ERRORS]
        ]
        if not skip_invalid:
            return DatasetImportOut(imported=0, skipped=0, format=parsed.format, errors=errors)
        valid = [row for i, row in enumerate(valid) if i not in refused]
        rows = await service.add_items(session, context.organization_id, dataset, [row for _, row in valid])
    describe(request, "dataset", dataset.id, imported=len(rows), skipped=len(parsed.errors))
    return DatasetImportOut(
        imported=len(rows), skipped=len(parsed.errors), format=parsed.format, errors=errors
    )
