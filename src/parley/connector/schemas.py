"""The Order resource exactly as the spec types it, its envelopes, and the field catalogue.

``ORDER_FIELDS`` is the single list of fields in spec order with the kind of each; the importer, the
demo generator, the table and the pre-serialized payload all follow it, and the Pydantic models below
mirror it for the OpenAPI description (a test checks that the two agree).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue


class FieldKind(StrEnum):
    INTEGER = "integer"
    NUMBER = "number"
    JSON = "json"
    STRING = "string"
    DATE = "date"  # a string in the spec; normalized to ISO 8601 on import


_INT, _NUM, _JSON, _STR, _DATE = (
    FieldKind.INTEGER,
    FieldKind.NUMBER,
    FieldKind.JSON,
    FieldKind.STRING,
    FieldKind.DATE,
)

ORDER_FIELDS: tuple[tuple[str, FieldKind], ...] = (
    ("id", _INT),
    ("station_id", _INT),
    ("missing_parts", _INT),
    ("zu_verplanen", _INT),
    ("est_hours_karo", _NUM),
    ("est_hours_lack", _NUM),
    ("est_hours_mech", _NUM),
    ("total_net_cost", _NUM),
    ("total_gross_cost", _NUM),
    ("insurance_json", _JSON),
    ("costs_json", _JSON),
    ("short_name", _STR),
    ("plate", _STR),
    ("person", _STR),
    ("phone", _STR),
    ("email", _STR),
    ("damage", _STR),
    ("project_status", _STR),
    ("station_state", _STR),
    ("parts_status", _STR),
    ("shop_date", _DATE),
    ("repair_date", _DATE),
    ("finish_date", _DATE),
    ("planned_delivery_date", _DATE),
    ("appointment_date", _DATE),
    ("vin", _STR),
    ("kba", _STR),
    ("manufacturer_name", _STR),
    ("model_name", _STR),
    ("sub_model_name", _STR),
    ("engine_type", _STR),
    ("engine_size", _STR),
    ("engine_power", _STR),
    ("engine_code", _STR),
    ("curb_weight", _STR),
    ("gross_weight", _STR),
    ("first_registration", _DATE),
    ("last_registration", _DATE),
    ("hu_au", _DATE),
    ("mileage", _STR),
    ("country_of_origin", _STR),
    ("vehicle_owner", _STR),
    ("owner_phone", _STR),
    ("owner_address", _STR),
    ("external_calculation", _STR),
    ("express_link", _STR),
    ("address", _STR),
    ("zip_code", _STR),
    ("city", _STR),
    ("country", _STR),
    ("plate_city", _STR),
    ("plate_city_phonetic", _STR),
    ("remarks", _STR),
)
FIELD_NAMES: tuple[str, ...] = tuple(name for name, _ in ORDER_FIELDS)
FIELD_KINDS: dict[str, FieldKind] = dict(ORDER_FIELDS)

_DATE_DOC = (
    "ISO 8601: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM:SS` (shop-local time; with `Z`/`±HH:MM` when the "
    "source had a zone) or `YYYY-MM` (month precision); empty string when unknown."
)


class Order(BaseModel):
    """One repair-shop order: customer, vehicle and scheduling data. Strings are never null ("" = unknown)."""

    model_config = ConfigDict(extra="forbid")

    id: int = Field(ge=1, description="Order id (the number the caller reads out).")
    station_id: int = Field(description="Workshop station (bay) the car is assigned to.")
    missing_parts: int = Field(description="Number of parts still missing.")
    zu_verplanen: int = Field(description="1 when the order still has to be scheduled, else 0.")
    est_hours_karo: float = Field(description="Estimated body-work hours.")
    est_hours_lack: float = Field(description="Estimated paint hours.")
    est_hours_mech: float = Field(description="Estimated mechanical hours.")
    total_net_cost: float = Field(description="Total net cost in EUR.")
    total_gross_cost: float = Field(description="Total gross cost in EUR (net plus VAT).")
    insurance_json: JsonValue = Field(description="Insurance claim data as a JSON value, or null.")
    costs_json: JsonValue = Field(description="Cost breakdown as a JSON value, or null.")
    short_name: str
    plate: str = Field(description="Licence plate, e.g. `B-AB 1234`.")
    person: str = Field(description="Customer name.")
    phone: str
    email: str
    damage: str = Field(description="Damage or work description.")
    project_status: str
    station_state: str
    parts_status: str
    shop_date: str = Field(description="Date the car came into the shop. " + _DATE_DOC)
    repair_date: str = Field(description="Repair start. " + _DATE_DOC)
    finish_date: str = Field(description="Planned or actual repair end. " + _DATE_DOC)
    planned_delivery_date: str = Field(description="Planned hand-over to the customer. " + _DATE_DOC)
    appointment_date: str = Field(description="Customer appointment. " + _DATE_DOC)
    vin: str = Field(description="Vehicle identification number (17 characters).")
    kba: str = Field(description="KBA key number HSN/TSN, e.g. `0603/BFZ`.")
    manufacturer_name: str
    model_name: str
    sub_model_name: str
    engine_type: str
    engine_size: str
    engine_power: str
    engine_code: str
    curb_weight: str
    gross_weight: str
    first_registration: str = Field(description=_DATE_DOC)
    last_registration: str = Field(description=_DATE_DOC)
    hu_au: str = Field(description="Next general/emissions inspection due. " + _DATE_DOC)
    mileage: str
    country_of_origin: str
    vehicle_owner: str
    owner_phone: str
    owner_address: str
    external_calculation: str
    express_link: str
    address: str
    zip_code: str
    city: str
    country: str
    plate_city: str = Field(description="City or district of the plate's area code.")
    plate_city_phonetic: str = Field(
        description="The plate's area code spelled for speech (German spelling alphabet)."
    )
    remarks: str


class OrderEnvelope(BaseModel):
    """The 200 body of operation #6."""

    success: Literal[True]
    order: Order
    message: str


class ErrorEnvelope(BaseModel):
    """Every non-validation error of the order operation: the same envelope with ``order`` null."""

    success: Literal[False]
    order: None
    message: str


class Health(BaseModel):
    status: Literal["ok"]
    database: Literal["ok"]
