"""The redaction rules (parley.kit.redaction) and the log processor: German formats, Luhn, IBANs,
custom patterns with a time limit, and what must stay readable (order numbers, dates, amounts)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
import structlog

from parley.kit.logging import configure_logging
from parley.kit.redaction import CustomPattern, PatternError, compile_custom, luhn_valid, redactor

ALL = redactor()


@pytest.mark.parametrize(
    "text",
    [
        "0171 1234567",
        "01711234567",
        "+49 (0)30 123456",
        "+49 30 123456",
        "+4930123456",
        "0049 171 1234567",
        "030/123456",
        "030-123456",
        "(030) 123456",
        "+1 415 555 2671",
        "0800 123 4567",
    ],
)
def test_phone_numbers_in_german_and_international_formats_are_replaced(text: str) -> None:
    assert ALL.text(f"Rufen Sie mich an: {text}, danke.") == "Rufen Sie mich an: [phone], danke."


@pytest.mark.parametrize(
    "text",
    [
        "Meine Auftragsnummer ist 12345678.",  # no leading 0 or +: never a phone number
        "Bestellung A-1001 und 4711",
        "PLZ 10115 Berlin",
        "am 01.02.2026 um 09:30",
        "2026-11-25T20:17:27Z",
        "Das kostet 1.234,56 Euro",
        "Nummer 0815",  # too short for a phone number
        "Karte 4111111111111112",  # 16 digits that fail the Luhn check
        "ses_01JABCDEF0123456789ABCDEFG",
    ],
)
def test_what_is_not_personal_data_stays_readable(text: str) -> None:
    assert ALL.text(text) == text


def test_email_iban_and_card_numbers() -> None:
    assert ALL.text("Mail an max.mustermann@example.co.uk.") == "Mail an [email]."
    assert ALL.text("IBAN DE89 3704 0044 0532 0130 00 bitte") == "IBAN [iban] bitte"
    assert ALL.text("de89370400440532013000") == "[iban]"  # speech recognisers write lowercase
    assert ALL.text("GB29 NWBK 6016 1331 9268 19") == "[iban]"
    assert ALL.text("Karte 4111 1111 1111 1111 ok") == "Karte [card] ok"
    assert ALL.text("Karte 5500-0000-0000-0004.") == "Karte [card]."
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")


def test_only_the_chosen_kinds_and_their_replacements() -> None:
    only_mail = redactor(["email"], {"email": "<E-Mail>"})
    assert only_mail.text("a@b.de oder 0171 1234567") == "<E-Mail> oder 0171 1234567"


def test_values_are_redacted_deeply_and_keys_are_kept() -> None:
    value = {"phone": "0171 1234567", "nested": [{"mail": "x@y.de"}, 4711, None], "order": "12345678"}
    assert ALL.value(value) == {
        "phone": "[phone]",
        "nested": [{"mail": "[email]"}, 4711, None],
        "order": "12345678",
    }


def test_custom_patterns_run_first_and_replace_literally() -> None:
    built = redactor(custom=[CustomPattern("customer", r"KD-\d{6}", r"[kunde \1]")])
    assert built.text("Kunde KD-123456, Tel 0171 1234567") == r"Kunde [kunde \1], Tel [phone]"


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("([", "not a valid regular expression"),
        ("x*", "matches the empty text"),
        ("(a|aa)+$", "takes too long"),
    ],
)
def test_bad_custom_patterns_are_refused_with_a_reason(pattern: str, reason: str) -> None:
    with pytest.raises(PatternError, match=reason):
        compile_custom(pattern)


def test_a_pattern_that_runs_out_of_time_replaces_the_whole_text() -> None:
    # accepted by no check (written straight into the redactor): the time limit still holds
    built = redactor([], custom=[CustomPattern("slow", "(a|aa)+$", "[hidden]")])
    assert built.text("a" * 60 + "!") == "[hidden]"
    assert built.text("nothing to see") == "nothing to see"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    saved = structlog.get_config()
    yield
    structlog.reset_defaults()
    structlog.configure(**saved)


@pytest.mark.usefixtures("restore_logging")
def test_log_lines_have_personal_data_replaced() -> None:
    buffer = io.StringIO()
    configure_logging("INFO", json=True)
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(file=buffer), cache_logger_on_first_use=False
    )
    structlog.get_logger("t").info(
        "caller_said",
        text="Ich bin unter 0171 1234567 erreichbar",
        extra={"mail": "max@example.de"},
        order="4711",
    )
    line = json.loads(buffer.getvalue())
    assert line["text"] == "Ich bin unter [phone] erreichbar"
    assert line["extra"] == {"mail": "[email]"} and line["order"] == "4711"
    assert line["event"] == "caller_said" and line["timestamp"][:2] == "20"


@pytest.mark.usefixtures("restore_logging")
def test_log_redaction_can_be_turned_off() -> None:
    buffer = io.StringIO()
    configure_logging("INFO", json=True, redact=False)
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(file=buffer), cache_logger_on_first_use=False
    )
    structlog.get_logger("t").info("caller_said", text="0171 1234567")
    assert json.loads(buffer.getvalue())["text"] == "0171 1234567"
