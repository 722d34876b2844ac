"""Numbers said in words, German and English, read as the digits they name.

Callers (and speech recognizers) say an order number digit by digit ("vier sieben eins eins",
"four seven one one"), grouped ("siebenundvierzig elf", "forty seven eleven"), as one number
("zweiundvierzig", "hundertdrei", "one hundred and three"), or mix digits and words ("4 7 eleven").
Compounds, "und"/"and", "hundert"/"tausend" and their English counterparts are read by ``text2num``
(its ``alpha2digit``, a maintained parser for German and English among others); what it leaves as
words on purpose (a lone "eins", "ein", "zwo", "oh", "double") is read here. Anything else in the
answer that is not a filler word ("meine Nummer ist ...") makes it not a number.
"""

from __future__ import annotations

import re

from text_to_num import alpha2digit  # type: ignore[import-untyped]

_SINGLE = {
    "null": "0",
    "eins": "1",
    "ein": "1",
    "eine": "1",
    "zwo": "2",
    "zero": "0",
    "oh": "0",
    "o": "0",
    "one": "1",
}
_MULTIPLIERS = {"doppel": 2, "double": 2, "triple": 3, "dreifach": 3}
FILLER = frozenset(
    {
        "die", "der", "ist", "nummer", "auftragsnummer", "bestellnummer", "meine", "mein", "lautet",
        "my", "is", "the", "number", "order", "it", "it's", "its", "äh", "ähm", "uh", "um", "and", "und",
        "bitte", "please", "also", "so",
    }
)  # fmt: skip
_TOKEN = re.compile(r"\d+|[^\W\d_]+(?:'[a-z]+)?", re.UNICODE)
_LANGUAGES = ("de", "en")


def _words_to_digits(text: str) -> str:
    for language in _LANGUAGES:
        text = alpha2digit(text, language)
    return text


def spoken_digits(text: str) -> str | None:
    """The digit string named by ``text``, or None when it holds anything but numbers and fillers."""
    lowered = text.lower().replace("-", " ")
    # "4711" typed as "47 11" or "4.7.1.1" stays digits; words become digits group by group
    converted = _words_to_digits(" ".join(_TOKEN.findall(lowered)))
    digits: list[str] = []
    repeat = 1
    for token in _TOKEN.findall(converted):
        if token.isdigit():
            digits.append(token[0] * (repeat - 1) + token)
            repeat = 1
        elif token in _SINGLE:
            digits.append(_SINGLE[token] * repeat)
            repeat = 1
        elif token in _MULTIPLIERS:
            repeat = _MULTIPLIERS[token]
        elif token in FILLER:
            continue
        else:
            return None
    return "".join(digits) or None


def spoken_number(text: str) -> int | None:
    """One number said in words or digits ("zweiundvierzig" → 42), or None."""
    digits = spoken_digits(text)
    return int(digits) if digits else None


def too_many_digits(language: str, heard: int, allowed: int) -> str:
    """The re-ask for a number longer than the collect node allows (no lookup with it)."""
    if language == "de":
        return (
            f"Das waren {heard} Ziffern, die Nummer hat höchstens {allowed}. "
            "Bitte sagen Sie sie noch einmal, Ziffer für Ziffer."
        )
    return f"That was {heard} digits; the number has at most {allowed}. Please say it again, digit by digit."
