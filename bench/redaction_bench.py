"""What redaction costs per call record: writing a realistic call record (20 turns, 3 tool calls) with
``record_call`` into a migrated SQLite database, with and without redacting it first, in one run.

    .venv/bin/python bench/redaction_bench.py --records 400
    .venv/bin/python bench/redaction_bench.py --records 400 \
        --database-url postgresql+asyncpg://postgres@127.0.0.1:5432/parley_bench   # an empty database

Prints p50 and p99 (milliseconds) of: the redaction alone (building the organization's redactor,
redacting the conversation state as ``sessions`` does before it writes, re-reading it), writing the
record without redaction, and redacting + writing; the two kinds of write alternate record by record.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import async_sessionmaker

from parley.calls.contracts import CallRecordIn
from parley.calls.service import record_call
from parley.kit.db import create_engine
from parley.kit.logging import configure_logging
from parley.kit.migrate import upgrade
from parley.privacy.models import PrivacySettings
from parley.privacy.service import redact_state, redactor_of

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
LINES = [
    ("agent", "Guten Tag, hier ist der Auftragsservice von Autohaus Demo. Wie kann ich helfen?"),
    ("caller", "Ja hallo, ich rufe wegen meines Autos an, Auftrag 12345678."),
    ("agent", "Einen Moment, ich sehe nach. Ihr Mercedes C-Klasse wartet auf Teile, fertig am 30. November."),
    ("caller", "Können Sie mich zurückrufen? Meine Nummer ist 0171 1234567, oder +49 (0)30 123456."),
    ("agent", "Gern. Unter welcher E-Mail-Adresse erreichen wir Sie außerdem?"),
    ("caller", "max.mustermann@example.de, und die Rechnung bitte an DE89 3704 0044 0532 0130 00."),
    ("agent", "Notiert. Kann ich sonst noch etwas für Sie tun?"),
    ("caller", "Nein danke, das war alles. Schönen Tag noch!"),
    ("agent", "Vielen Dank für Ihren Anruf. Auf Wiederhören!"),
    ("caller", "Tschüss."),
]


def state(index: int) -> dict[str, Any]:
    started = START + timedelta(seconds=index)
    transcript = [
        {"index": i, "speaker": speaker, "text": text, "at": (started + timedelta(seconds=4 * i)).isoformat()}
        for i, (speaker, text) in enumerate(LINES * 2)
    ]
    tool_calls = [
        {
            "tool_id": f"tool_{n}",
            "tool_name": name,
            "node_id": "n_tool",
            "arguments": {"order_id": "12345678", "note": LINES[3][1]},
            "status": "ok",
            "http_status": 200,
            "latency_ms": 84.0,
            "result": {
                "success": True,
                "order": {
                    "id": 12345678,
                    "customer": {"email": "kunde@example.org", "phone": "+49 30 5556677"},
                },
                "lines": [{"price": p, "text": f"Position {p}"} for p in range(10)],
            },
            "error": None,
            "at": started.isoformat(),
        }
        for n, name in enumerate(("order_lookup", "crm_note", "callback"))
    ]
    return {
        "transcript": transcript,
        "tool_calls": tool_calls,
        "signals": [],
        "variables": {"order_number": "12345678", "callback": True, "note": LINES[3][1]},
        "llm": None,
    }


def record_of(organization_id: str, index: int, data: dict[str, Any]) -> CallRecordIn:
    started = START + timedelta(seconds=index)
    return CallRecordIn.model_validate(
        {
            "organization_id": organization_id,
            "session_id": f"ses_bench_{index}",
            "flow_id": "flow_bench",
            "flow_version": 1,
            "channel": "phone",
            "caller": "+4930123456",
            "started_at": started,
            "ended_at": started + timedelta(seconds=95),
            "outcome": "completed",
            "transcript": data["transcript"],
            "tool_calls": data["tool_calls"],
            "variables": data["variables"],
        }
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run(records: int, database_url: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = database_url or f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        await asyncio.to_thread(upgrade, url)
        engine = create_engine(url)
        maker = async_sessionmaker(engine, expire_on_commit=False)
        settings = PrivacySettings(
            organization_id="org_bench",
            redaction_enabled=True,
            redaction_kinds=["phone", "email", "iban", "card"],
            replacements={},
            custom_patterns=[{"name": "kunde", "pattern": r"KD-\d{6}", "replacement": "[kunde]"}],
            retention_days=None,
            recording_notice={},
        )
        redact_ms: list[float] = []
        plain_ms: list[float] = []
        redacted_ms: list[float] = []
        for index in range(records):
            for redacting in (index % 2 == 0, index % 2 == 1):  # alternate which goes first
                data = state(2 * index + int(redacting))
                begin = time.perf_counter()
                if redacting:
                    redactor = redactor_of(settings)
                    assert redactor is not None
                    data = redact_state(redactor, data, ended=True)
                    redact_ms.append((time.perf_counter() - begin) * 1000)
                record = record_of("org_bench", 2 * index + int(redacting), data)
                async with maker() as session:
                    await record_call(session, record)
                    await session.commit()
                (redacted_ms if redacting else plain_ms).append((time.perf_counter() - begin) * 1000)
        await engine.dispose()
    print(f"{records} records each, {'SQLite (file)' if database_url is None else 'PostgreSQL'}, one process")
    print(f"{'':34} {'p50 ms':>8} {'p99 ms':>8}")
    for label, values in (
        ("redaction alone", redact_ms),
        ("write without redaction", plain_ms),
        ("redact + write", redacted_ms),
    ):
        print(f"{label:34} {percentile(values, 0.5):8.3f} {percentile(values, 0.99):8.3f}")
    ratio = statistics.median(redacted_ms) / statistics.median(plain_ms)
    print(f"median ratio redact+write / write: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=400)
    parser.add_argument("--database-url", help="a migrated-or-empty database (default: a fresh SQLite file)")
    args = parser.parse_args()
    configure_logging("WARNING", json=True)
    asyncio.run(run(args.records, args.database_url))


if __name__ == "__main__":
    main()
