"""Realistic, deterministic demo orders of a German repair shop (body work, paint, mechanics).

Same seed and reference date, same orders. Everything personal is invented: names are combined at
random, e-mail addresses use the reserved ``example.*`` domains and phone numbers are fictitious.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from parley.connector.schemas import FIELD_NAMES

VAT_RATE = 0.19
RATE_BODY, RATE_PAINT, RATE_MECH = 128.0, 142.0, 118.0  # EUR per hour, net

# (area code, city, zip range, phone area code)
_CITIES: tuple[tuple[str, str, tuple[int, int], str], ...] = (
    ("B", "Berlin", (10115, 14199), "30"),
    ("HH", "Hamburg", (20095, 22769), "40"),
    ("M", "München", (80331, 81929), "89"),
    ("K", "Köln", (50667, 51149), "221"),
    ("F", "Frankfurt am Main", (60306, 60599), "69"),
    ("S", "Stuttgart", (70173, 70629), "711"),
    ("D", "Düsseldorf", (40210, 40629), "211"),
    ("DO", "Dortmund", (44135, 44388), "231"),
    ("E", "Essen", (45127, 45359), "201"),
    ("HB", "Bremen", (28195, 28779), "421"),
    ("L", "Leipzig", (4103, 4357), "341"),
    ("DD", "Dresden", (1067, 1328), "351"),
    ("H", "Hannover", (30159, 30669), "511"),
    ("N", "Nürnberg", (90402, 90491), "911"),
    ("BN", "Bonn", (53111, 53229), "228"),
    ("MS", "Münster", (48143, 48167), "251"),
    ("KA", "Karlsruhe", (76131, 76229), "721"),
    ("MA", "Mannheim", (68159, 68309), "621"),
    ("A", "Augsburg", (86150, 86199), "821"),
    ("KI", "Kiel", (24103, 24159), "431"),
    ("HRO", "Rostock", (18055, 18147), "381"),
    ("P", "Potsdam", (14467, 14482), "331"),
)

# German spelling alphabet (DIN 5009, traditional names), as a caller hears it read out.
SPELLING = {
    "A": "Anton", "B": "Berta", "C": "Cäsar", "D": "Dora", "E": "Emil", "F": "Friedrich", "G": "Gustav",
    "H": "Heinrich", "I": "Ida", "J": "Julius", "K": "Kaufmann", "L": "Ludwig", "M": "Martha",
    "N": "Nordpol", "O": "Otto", "P": "Paula", "Q": "Quelle", "R": "Richard", "S": "Samuel",
    "T": "Theodor", "U": "Ulrich", "V": "Viktor", "W": "Wilhelm", "X": "Xanthippe", "Y": "Ypsilon",
    "Z": "Zacharias",
}  # fmt: skip

_FIRST = [
    "Anna",
    "Lukas",
    "Marie",
    "Leon",
    "Sophie",
    "Finn",
    "Emilia",
    "Paul",
    "Hannah",
    "Jonas",
    "Lena",
    "Felix",
    "Mia",
    "Maximilian",
    "Laura",
    "Elias",
    "Julia",
    "Noah",
    "Katharina",
    "Ben",
    "Sabine",
    "Thomas",
    "Petra",
    "Michael",
    "Andrea",
    "Stefan",
    "Birgit",
    "Jürgen",
    "Ursula",
    "Klaus",
    "Monika",
    "Frank",
    "Claudia",
    "Uwe",
    "Renate",
    "Dieter",
    "Jörg",
    "Susanne",
    "Günther",
    "Gisela",
    "Özlem",
    "Mehmet",
    "Ayşe",
    "Piotr",
    "Agnieszka",
]
_LAST = [
    "Müller",
    "Schmidt",
    "Schneider",
    "Fischer",
    "Weber",
    "Meyer",
    "Wagner",
    "Becker",
    "Schulz",
    "Hoffmann",
    "Schäfer",
    "Koch",
    "Bauer",
    "Richter",
    "Klein",
    "Wolf",
    "Schröder",
    "Neumann",
    "Schwarz",
    "Zimmermann",
    "Braun",
    "Krüger",
    "Hofmann",
    "Hartmann",
    "Lange",
    "Schmitt",
    "Werner",
    "Krause",
    "Meier",
    "Lehmann",
    "Köhler",
    "Huber",
    "Kaiser",
    "Fuchs",
    "Peters",
    "Scholz",
    "Möller",
    "Weiß",
    "Jung",
    "Hahn",
    "Vogel",
    "Friedrich",
    "Günther",
    "Yılmaz",
    "Kowalski",
    "Nowak",
    "Öztürk",
    "Keller",
    "Groß",
]
_STREETS = (
    "Hauptstraße",
    "Schulstraße",
    "Gartenstraße",
    "Bahnhofstraße",
    "Dorfstraße",
    "Bergstraße",
    "Birkenweg",
    "Lindenstraße",
    "Kirchstraße",
    "Waldstraße",
    "Ringstraße",
    "Schillerstraße",
    "Goethestraße",
    "Mühlenweg",
    "Am Markt",
    "Feldstraße",
    "Rosenweg",
    "Industriestraße",
    "Parkstraße",
    "Auf dem Kamp",
)
_LEASING = ("Nordlicht Leasing GmbH", "Rheinland Fuhrpark AG", "Südstern Autovermietung GmbH")
_INSURERS = ("Allianz", "HUK-COBURG", "R+V", "DEVK", "AXA", "Generali", "LVM", "Provinzial")


@dataclass(frozen=True)
class _Model:
    manufacturer: str
    wmi: str
    hsn: str
    origin: str
    model: str
    sub_models: tuple[str, ...]
    # (engine type, ccm, kW, engine code, curb weight kg)
    engines: tuple[tuple[str, int, int, str, int], ...]


_MODELS: tuple[_Model, ...] = (
    _Model("Volkswagen", "WVW", "0603", "Deutschland", "Golf", ("Golf VIII Life", "Golf VIII Style", "Golf VII Comfortline"),
           (("Benzin", 1498, 110, "DPCA", 1317), ("Diesel", 1968, 85, "DTTC", 1389), ("Benzin", 999, 81, "DLAA", 1255))),
    _Model("Volkswagen", "WVW", "0603", "Deutschland", "Passat", ("Passat Variant Business", "Passat Variant Elegance"),
           (("Diesel", 1968, 110, "DTUA", 1593), ("Benzin", 1498, 110, "DPCA", 1497))),
    _Model("Volkswagen", "WVW", "0603", "Deutschland", "ID.3", ("ID.3 Pro", "ID.3 Pro S"),
           (("Elektro", 0, 150, "EBJ", 1794),)),
    _Model("BMW", "WBA", "0005", "Deutschland", "3er", ("320d Touring", "318i Limousine", "330e Limousine"),
           (("Diesel", 1995, 140, "B47D20", 1595), ("Benzin", 1998, 115, "B48B20", 1510), ("Hybrid", 1998, 215, "B48B20", 1815))),
    _Model("BMW", "WBA", "0005", "Deutschland", "X1", ("sDrive18i", "xDrive23d"),
           (("Benzin", 1499, 100, "B38A15", 1545), ("Diesel", 1995, 145, "B47D20", 1720))),
    _Model("Mercedes-Benz", "WDD", "1313", "Deutschland", "C-Klasse", ("C 200 T-Modell", "C 220 d Limousine"),
           (("Benzin", 1496, 150, "M254", 1660), ("Diesel", 1993, 147, "OM654", 1750))),
    _Model("Mercedes-Benz", "WDD", "1313", "Deutschland", "A-Klasse", ("A 180", "A 200 d"),
           (("Benzin", 1332, 100, "M282", 1375), ("Diesel", 1950, 110, "OM654q", 1455))),
    _Model("Audi", "WAU", "0588", "Deutschland", "A4", ("A4 Avant 35 TDI", "A4 Limousine 40 TFSI"),
           (("Diesel", 1968, 120, "DTPA", 1575), ("Benzin", 1984, 150, "DMSA", 1530))),
    _Model("Opel", "W0L", "0035", "Deutschland", "Astra", ("Astra L Edition", "Astra Sports Tourer GS"),
           (("Benzin", 1199, 96, "F12XHT", 1353), ("Diesel", 1499, 96, "F15DT", 1420))),
    _Model("Ford", "WF0", "8566", "Deutschland", "Focus", ("Focus Titanium", "Focus Turnier Cool & Connect"),
           (("Benzin", 999, 92, "M0DA", 1322), ("Diesel", 1499, 88, "XWDB", 1404))),
    _Model("Škoda", "TMB", "8004", "Tschechien", "Octavia", ("Octavia Combi Style", "Octavia Limousine Ambition"),
           (("Diesel", 1968, 110, "DTRD", 1465), ("Benzin", 1498, 110, "DPCA", 1361))),
    _Model("Seat", "VSS", "7593", "Spanien", "Leon", ("Leon Sportstourer FR", "Leon Xcellence"),
           (("Benzin", 1498, 110, "DPCA", 1336),)),
    _Model("Renault", "VF1", "3001", "Frankreich", "Clio", ("Clio V Evolution", "Clio V Techno"),
           (("Benzin", 999, 67, "H4D", 1126),)),
    _Model("Toyota", "JTD", "5013", "Japan", "Corolla", ("Corolla Touring Sports Hybrid", "Corolla Hybrid Team D"),
           (("Hybrid", 1798, 103, "2ZR-FXE", 1395),)),
    _Model("Hyundai", "KMH", "8252", "Südkorea", "Tucson", ("Tucson Trend", "Tucson Prime"),
           (("Hybrid", 1598, 169, "G4FT", 1632), ("Benzin", 1598, 110, "G4FP", 1498))),
)  # fmt: skip

_DAMAGES: tuple[tuple[str, tuple[float, float], tuple[float, float], tuple[float, float], bool], ...] = (
    # (description, body hours, paint hours, mech hours, usually an insurance claim)
    ("Frontschaden nach Auffahrunfall, Stoßfänger und Kühlergrill", (4, 12), (3, 8), (1, 4), True),
    ("Heckschaden, Heckklappe und Stoßfänger hinten", (3, 10), (3, 7), (0, 2), True),
    ("Hagelschaden Dach und Motorhaube (Ausbeulen ohne Lackieren)", (6, 20), (0, 2), (0, 1), True),
    ("Parkrempler Tür hinten links, Kratzer und Delle", (1, 4), (2, 5), (0, 0.5), True),
    ("Wildunfall, Scheinwerfer und Kotflügel vorne rechts", (3, 9), (2, 6), (1, 3), True),
    ("Glasschaden Windschutzscheibe, Kamera kalibrieren", (0, 0.5), (0, 0), (1.5, 3), True),
    ("Inspektion mit Ölwechsel und Bremsen vorne", (0, 0), (0, 0), (2, 5), False),
    ("Steinschläge Motorhaube ausbessern", (0, 1), (2, 4), (0, 0), False),
    ("Rost an Radlauf hinten beseitigen", (2, 6), (2, 5), (0, 0.5), False),
    ("Kupplung und Zweimassenschwungrad erneuern", (0, 0), (0, 0), (6, 10), False),
)
_REMARKS = (
    "",
    "",
    "",
    "Kunde wünscht Rückruf vor der Abholung.",
    "Ersatzwagen bis Fertigstellung gestellt.",
    "Fahrzeug wird vom Hol- und Bringservice gebracht.",
    "Schlüssel im Schlüsseltresor, Fach 12.",
    "Kostenvoranschlag vor Reparaturbeginn freigeben lassen.",
    "Gutachter-Besichtigung vereinbart.",
)
_VIN_CHARS = "ABCDEFGHJKLMNPRSTUVWXYZ0123456789"  # no I, O, Q
_YEAR_CODES = "ABCDEFGHJKLMNPRSTVWXY123456789"  # VIN model year code, 2010 = A


def spell(letters: str) -> str:
    return " ".join(SPELLING[c] for c in letters)


def _round(value: float, places: int = 2) -> float:
    return round(value + 0.0, places)


class DemoGenerator:
    def __init__(self, seed: int, reference: date) -> None:
        self._rng = random.Random(seed)
        self._reference = reference

    def _person(self) -> tuple[str, str, str]:
        rng = self._rng
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        local = f"{first}.{last}".lower()
        for a, b in (
            ("ä", "ae"),
            ("ö", "oe"),
            ("ü", "ue"),
            ("ß", "ss"),
            ("ş", "s"),
            ("ı", "i"),
            ("ğ", "g"),
        ):
            local = local.replace(a, b)
        email = f"{local}{rng.randint(1, 99) if rng.random() < 0.3 else ''}@example.{rng.choice(('com', 'org', 'net'))}"
        return first, last, email

    def _phone(self, area: str) -> str:
        rng = self._rng
        if rng.random() < 0.55:
            return f"+49 {rng.choice(('151', '160', '170', '171', '176'))} {rng.randint(1000000, 99999999)}"
        return f"+49 {area} {rng.randint(100000, 9999999)}"

    def _address(self, city: tuple[str, str, tuple[int, int], str]) -> tuple[str, str]:
        rng = self._rng
        street = rng.choice(_STREETS)
        return (
            f"{street} {rng.randint(1, 180)}{rng.choice(('', '', '', 'a', 'b'))}",
            f"{rng.randint(*city[2]):05d}",
        )

    def _plate(self, code: str) -> str:
        rng = self._rng
        letters = "".join(
            rng.choice(string.ascii_uppercase.replace("Q", "")) for _ in range(rng.randint(1, 2))
        )
        digits = rng.randint(1, 9999) if len(code) + len(letters) < 5 else rng.randint(1, 999)
        return f"{code}-{letters} {digits}"

    def _vin(self, model: _Model, year: int) -> str:
        rng = self._rng
        body = "".join(rng.choice(_VIN_CHARS) for _ in range(6))
        serial = "".join(rng.choice("0123456789") for _ in range(6))
        year_code = _YEAR_CODES[(year - 2010) % len(_YEAR_CODES)]
        return f"{model.wmi}{body}{year_code}{rng.choice(_VIN_CHARS)}{serial}"

    def order(self, order_id: int) -> dict[str, Any]:
        rng = self._rng
        city = rng.choice(_CITIES) if rng.random() < 0.85 else _CITIES[0]
        code, city_name, _, area = city
        first, last, email = self._person()
        person = f"{first} {last}"
        street, zip_code = self._address(city)
        model = rng.choice(_MODELS)
        engine_type, ccm, kw, engine_code, curb = rng.choice(model.engines)
        damage, body_h, paint_h, mech_h, claim = rng.choice(_DAMAGES)

        # Dates: shop <= repair <= finish <= planned delivery, spread around the reference date.
        shop = self._reference + timedelta(days=rng.randint(-60, 21))
        repair = shop + timedelta(days=rng.randint(0, 5))
        finish = repair + timedelta(days=rng.randint(0, 10))
        delivery = finish + timedelta(days=rng.randint(0, 3))
        appointment = datetime.combine(shop, time(rng.randint(7, 16), rng.choice((0, 15, 30, 45))))
        build_year = rng.randint(2012, self._reference.year - 1)
        first_reg = min(date(build_year, rng.randint(1, 12), rng.randint(1, 28)), shop)
        # Re-registered (new owner) for some cars: somewhere between first registration and shop visit.
        last_reg = first_reg
        if rng.random() < 0.4:
            last_reg = first_reg + timedelta(days=int((shop - first_reg).days * rng.random()))
        due = self._reference.year * 12 + self._reference.month + rng.randint(1, 24)
        hu_due = date((due - 1) // 12, (due - 1) % 12 + 1, 1)
        age_years = max(0.5, (shop - first_reg).days / 365.25)

        hours = [_round(rng.uniform(*span), 1) for span in (body_h, paint_h, mech_h)]
        labour = [_round(h * rate) for h, rate in zip(hours, (RATE_BODY, RATE_PAINT, RATE_MECH), strict=True)]
        parts = _round(rng.uniform(40, 2400) if sum(hours) > 1 else rng.uniform(20, 300))
        paint_material = _round(hours[1] * rng.uniform(35, 60))
        net = _round(sum(labour) + parts + paint_material)
        gross = _round(net * (1 + VAT_RATE))
        costs = {
            "labour_body": labour[0],
            "labour_paint": labour[1],
            "labour_mechanics": labour[2],
            "parts": parts,
            "paint_material": paint_material,
            "net": net,
            "vat_rate": VAT_RATE,
            "vat": _round(gross - net),
            "gross": gross,
            "currency": "EUR",
        }
        insurance = None
        if claim and rng.random() < 0.75:
            insurance = {
                "insurer": rng.choice(_INSURERS),
                "coverage": rng.choice(("Haftpflicht", "Vollkasko", "Teilkasko")),
                "claim_number": f"{rng.randint(10, 99)}-{rng.randint(100000, 999999)}-{shop.year}",
                "deductible": rng.choice((0, 150, 300, 500, 1000)),
            }

        days_to_finish = (finish - self._reference).days
        if (delivery - self._reference).days < 0:
            status, state = "Ausgeliefert", "Abgeschlossen"
        elif days_to_finish < 0:
            status, state = "Fertig, wartet auf Abholung", "Abholbereit"
        elif (repair - self._reference).days > 0:
            status, state = "Angenommen", "Warteschlange"
        else:
            status = "In Reparatur"
            state = rng.choice(("Karosserie", "Lackierung", "Mechanik", "Montage", "Qualitätskontrolle"))
        missing = (
            0 if status in {"Ausgeliefert", "Fertig, wartet auf Abholung"} else rng.choice((0, 0, 0, 1, 2, 3))
        )
        if missing:
            parts_status = "Teile bestellt" if missing > 1 else "Teilweise geliefert"
            if status == "In Reparatur":
                status = "Wartet auf Teile"
        else:
            parts_status = "Vollständig" if parts > 60 else "Nicht benötigt"

        leased = rng.random() < 0.15
        owner = rng.choice(_LEASING) if leased else person
        owner_street, owner_zip = self._address(city) if leased else (street, zip_code)
        token = "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(16))
        order: dict[str, Any] = {
            "id": order_id,
            "station_id": rng.randint(1, 12),
            "missing_parts": missing,
            "zu_verplanen": 1 if status == "Angenommen" and rng.random() < 0.5 else 0,
            "est_hours_karo": hours[0],
            "est_hours_lack": hours[1],
            "est_hours_mech": hours[2],
            "total_net_cost": net,
            "total_gross_cost": gross,
            "insurance_json": insurance,
            "costs_json": costs if rng.random() < 0.8 else None,
            "short_name": f"{last} {model.model}",
            "plate": self._plate(code),
            "person": person,
            "phone": self._phone(area),
            "email": email,
            "damage": damage,
            "project_status": status,
            "station_state": state,
            "parts_status": parts_status,
            "shop_date": shop.isoformat(),
            "repair_date": repair.isoformat(),
            "finish_date": finish.isoformat(),
            "planned_delivery_date": delivery.isoformat(),
            "appointment_date": appointment.isoformat(timespec="seconds"),
            "vin": self._vin(model, build_year),
            "kba": f"{model.hsn}/{''.join(rng.choice(string.ascii_uppercase) for _ in range(3))}",
            "manufacturer_name": model.manufacturer,
            "model_name": model.model,
            "sub_model_name": rng.choice(model.sub_models),
            "engine_type": engine_type,
            "engine_size": f"{ccm} ccm" if ccm else "",
            "engine_power": f"{kw} kW ({round(kw * 1.35962)} PS)",
            "engine_code": engine_code,
            "curb_weight": f"{curb} kg",
            "gross_weight": f"{curb + rng.choice((450, 500, 530, 560))} kg",
            "first_registration": first_reg.isoformat(),
            "last_registration": last_reg.isoformat(),
            "hu_au": hu_due.isoformat()[:7],
            "mileage": f"{int(age_years * rng.randint(6000, 22000))} km",
            "country_of_origin": model.origin,
            "vehicle_owner": owner,
            "owner_phone": self._phone(area),
            "owner_address": f"{owner_street}, {owner_zip} {city_name}",
            "external_calculation": f"DAT-{shop.year}-{rng.randint(100000, 999999)}" if claim else "",
            "express_link": f"https://status.example.com/auftrag/{token}",
            "address": street,
            "zip_code": zip_code,
            "city": city_name,
            "country": "Deutschland",
            "plate_city": city_name,
            "plate_city_phonetic": spell(code),
            "remarks": rng.choice(_REMARKS),
        }
        assert tuple(order) == FIELD_NAMES  # the field catalogue and the generator stay in step
        return order


def generate_orders(
    count: int, *, seed: int = 1, start_id: int = 1, reference: date | None = None
) -> Iterator[dict[str, Any]]:
    """``count`` orders with ids ``start_id..``; deterministic for a given seed and reference date."""
    generator = DemoGenerator(seed, reference or date.today())
    for order_id in range(start_id, start_id + count):
        yield generator.order(order_id)
