"""Numbers said in words (German and English) read as the digits they name, in text and voice turns."""

from __future__ import annotations

import pytest

from parley.flows.definition import CollectNode
from parley.runtime.numbers import spoken_digits, spoken_number
from parley.runtime.validators import parse_answer


@pytest.mark.parametrize(
    ("said", "digits"),
    [
        ("zwölf", "12"),
        ("zweiundvierzig", "42"),
        ("zwei und vierzig", "42"),
        ("hundertdrei", "103"),
        ("einhundertachtzehn", "118"),
        ("dreitausendvierhundertzwölf", "3412"),
        ("achtundfünfzigtausendzweihundertneunzehn", "58219"),
        ("tausend", "1000"),
        ("vier sieben eins eins", "4711"),
        ("siebenundvierzig elf", "4711"),
        ("null acht fünfzehn", "0815"),
        ("eins", "1"),
        ("zwo drei", "23"),
        ("Meine Auftragsnummer ist vier, sieben, eins, eins.", "4711"),
        ("forty two", "42"),
        ("twenty-one", "21"),
        ("one two three", "123"),
        ("one hundred and three", "103"),
        ("oh eight", "08"),
        ("double seven", "77"),
        ("4 7 eleven", "4711"),
        ("47 11", "4711"),
        ("4-7-1-1", "4711"),
        ("vier 7 elf", "4711"),
    ],
)
def test_number_words_name_their_digits(said: str, digits: str) -> None:
    assert spoken_digits(said) == digits


@pytest.mark.parametrize(
    "said", ["", "hallo", "I have a question", "Ich weiß nicht", "und", "vier Autos", "???"]
)
def test_garbage_is_not_a_number(said: str) -> None:
    assert spoken_digits(said) is None


def test_spoken_number() -> None:
    assert spoken_number("zweiundvierzig") == 42
    assert spoken_number("nichts") is None


def _node(kind: str, **extra: object) -> CollectNode:
    return CollectNode.model_validate(
        {"id": "q", "type": "collect", "variable": "v", "kind": kind, "prompt": "?", **extra}
    )


def test_collect_kinds_read_number_words() -> None:
    assert parse_answer("zweiundvierzig", _node("digits", max_length=5)) == "42"
    assert parse_answer("forty two", _node("number")) == 42
    assert parse_answer("zwölf", _node("number")) == 12
    assert parse_answer("vierhundert", _node("number")) == 400
    assert parse_answer("3,5", _node("number")) == 3.5
    assert parse_answer("the answer is 7", _node("number")) == 7
    assert parse_answer("zwölf zwölf zwölf", _node("digits", max_length=5)) is None
