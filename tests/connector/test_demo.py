"""Demo data is realistic and deterministic."""

from __future__ import annotations

import re
from datetime import date, datetime

import pytest

from parley.connector.demo import SPELLING, VAT_RATE, generate_orders
from parley.connector.fields import convert_record
from parley.connector.schemas import FIELD_NAMES, Order

REFERENCE = date(2025, 6, 2)
ORDERS = list(generate_orders(2000, seed=3, reference=REFERENCE))


def test_deterministic_for_seed_and_date() -> None:
    again = list(generate_orders(50, seed=3, reference=REFERENCE))
    assert again == ORDERS[:50]
    assert list(generate_orders(50, seed=4, reference=REFERENCE)) != again


def test_every_order_matches_the_spec_and_the_importer() -> None:
    for order in ORDERS:
        assert tuple(order) == FIELD_NAMES
        Order.model_validate(order)
        assert convert_record(order, textual=False) == order  # already in normalized form


def test_costs_carry_19_percent_vat() -> None:
    for order in ORDERS:
        assert order["total_gross_cost"] == pytest.approx(order["total_net_cost"] * (1 + VAT_RATE), abs=0.006)
        assert order["total_net_cost"] > 0
        costs = order["costs_json"]
        if costs is not None:
            assert costs["net"] == order["total_net_cost"] and costs["gross"] == order["total_gross_cost"]
            parts = ("labour_body", "labour_paint", "labour_mechanics", "parts", "paint_material")
            assert sum(costs[p] for p in parts) == pytest.approx(costs["net"], abs=0.01)


def test_dates_are_ordered_and_iso() -> None:
    for order in ORDERS:
        shop, repair, finish, delivery = (
            date.fromisoformat(order[f])
            for f in ("shop_date", "repair_date", "finish_date", "planned_delivery_date")
        )
        assert shop <= repair <= finish <= delivery
        assert datetime.fromisoformat(order["appointment_date"]).date() == shop
        first, last = (
            date.fromisoformat(order["first_registration"]),
            date.fromisoformat(order["last_registration"]),
        )
        assert first <= last <= shop
        assert re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", order["hu_au"])


def test_vehicle_and_address_data_look_real() -> None:
    plate = re.compile(r"^([A-ZÄÖÜ]{1,3})-([A-Z]{1,2}) ([1-9][0-9]{0,3})$")
    for order in ORDERS:
        match = plate.match(order["plate"])
        assert match, order["plate"]
        assert len(order["plate"].replace("-", "").replace(" ", "")) <= 8
        assert order["plate_city_phonetic"] == " ".join(SPELLING[c] for c in match.group(1))
        assert order["plate_city"] == order["city"] or order["city"] == "Berlin"
        assert re.fullmatch(r"[A-HJ-NPR-Z0-9]{17}", order["vin"]), order["vin"]
        assert re.fullmatch(r"\d{4}/[A-Z]{3}", order["kba"])
        assert re.fullmatch(r"\d{5}", order["zip_code"])
        assert re.fullmatch(r"\+49 \d{2,3} \d{6,8}", order["phone"])
        assert order["email"].split("@")[1] in {"example.com", "example.org", "example.net"}
        assert order["engine_power"].endswith("PS)") and " kW " in order["engine_power"]
        assert order["engine_type"] in {"Benzin", "Diesel", "Elektro", "Hybrid"}
        assert (order["engine_size"] == "") == (order["engine_type"] == "Elektro")
        assert int(order["gross_weight"].split()[0]) > int(order["curb_weight"].split()[0])
        assert order["country"] == "Deutschland"
    assert len({o["manufacturer_name"] for o in ORDERS}) >= 8
    assert len({o["city"] for o in ORDERS}) >= 15
    assert len({o["person"] for o in ORDERS}) > 1000


def test_statuses_follow_the_dates() -> None:
    statuses = {o["project_status"] for o in ORDERS}
    assert statuses >= {"Angenommen", "In Reparatur", "Ausgeliefert", "Fertig, wartet auf Abholung"}
    for order in ORDERS:
        if order["project_status"] == "Ausgeliefert":
            assert date.fromisoformat(order["planned_delivery_date"]) < REFERENCE
            assert order["missing_parts"] == 0
        if order["missing_parts"]:
            assert order["parts_status"] in {"Teile bestellt", "Teilweise geliefert"}


def test_the_english_demo_agent_can_say_every_status() -> None:
    """The demo flow's ``in_english`` covers every German value the demo connector hands out."""
    from parley.demo.flows import ORDER_STATUS_FLOW

    in_english = ORDER_STATUS_FLOW["variables"]["in_english"]
    values = {o[field] for o in ORDERS for field in ("project_status", "station_state", "parts_status")}
    assert values <= set(in_english), values - set(in_english)
