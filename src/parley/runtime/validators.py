"""Understanding a caller's answer to a ``collect`` node, by kind, in German and English.

Each parser returns the normalised value or ``None`` when the answer does not fit. Speech-to-text
output is messy, so digits may come as words ("vier sieben eins eins", "four seven one one", "zweiundvierzig",
"forty two": see :mod:`parley.runtime.numbers`), with spaces or dashes ("47 11", "4-7-1-1"), and yes/no
answers in several common forms.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date
from typing import Any

from parley.flows.definition import CollectNode
from parley.runtime.numbers import spoken_digits

_YES = {
    "ja",
    "jawohl",
    "genau",
    "gerne",
    "gern",
    "klar",
    "richtig",
    "korrekt",
    "sicher",
    "yes",
    "yeah",
    "yep",
    "yup",
    "sure",
    "correct",
    "right",
    "ok",
    "okay",
    "please",
    "bitte",
}
_NO = {"nein", "ne", "nee", "nö", "no", "nope", "nicht", "kein", "keine", "nah", "falsch", "wrong"}
_WORD = re.compile(r"[0-9]+|[^\W\d_]+(?:'[a-z]+)?", re.UNICODE)
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)?")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_DE_DATE = re.compile(r"\b(\d{1,2})\.\s?(\d{1,2})\.\s?(\d{4})\b")
_SLASH_DATE = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")


def parse_digits(text: str, node: CollectNode) -> str | None:
    value = spoken_digits(text)
    if value is None:
        return None
    if node.min_length is not None and len(value) < node.min_length:
        return None
    if node.max_length is not None and len(value) > node.max_length:
        return None
    return value


def parse_number(text: str, node: CollectNode) -> int | float | None:
    match = _NUMBER.search(text)
    if match is None or text.replace(match.group(0), "").strip(" ,.!?"):
        # words, or digits among words ("vierhundert", "4 7 eleven"): the number they name
        words = spoken_digits(text)
        if words:
            return int(words)
        if match is None:
            return None
    raw = match.group(0).replace(",", ".")
    number = float(raw)
    return int(number) if number.is_integer() and "." not in raw else number


def _date(year: int, month: int, day: int) -> str | None:
    try:
        return date(year, month, day).isoformat()
    except ValueError:
        return None


def parse_date(text: str, node: CollectNode) -> str | None:
    if match := _ISO_DATE.search(text):
        return _date(int(match[1]), int(match[2]), int(match[3]))
    if match := _DE_DATE.search(text):
        return _date(int(match[3]), int(match[2]), int(match[1]))
    if match := _SLASH_DATE.search(text):  # dd/mm/yyyy, the common European reading
        return _date(int(match[3]), int(match[2]), int(match[1]))
    return None


def parse_yes_no(text: str, node: CollectNode) -> bool | None:
    words = set(_WORD.findall(text.lower()))
    yes, no = bool(words & _YES), bool(words & _NO)
    if no and not yes:
        return False
    if yes and not no:
        return True
    if "nein" in words or "no" in words:  # "nein, danke" / "no thanks, please" → no
        return False
    return None


def parse_choice(text: str, node: CollectNode) -> str | None:
    lowered = text.strip().lower()
    choices = node.choices or []
    for choice in choices:
        if lowered == choice.lower():
            return choice
    for choice in sorted(choices, key=len, reverse=True):
        if re.search(rf"\b{re.escape(choice.lower())}\b", lowered):
            return choice
    return None


def parse_regex(text: str, node: CollectNode) -> str | None:
    if not node.pattern:
        return text.strip() or None
    try:
        match = re.fullmatch(node.pattern, text.strip()) or re.search(node.pattern, text)
    except re.error:
        return None
    return match.group(0) if match else None


def parse_free_text(text: str, node: CollectNode) -> str | None:
    return text.strip() or None


PARSERS: dict[str, Callable[[str, CollectNode], Any]] = {
    "digits": parse_digits,
    "number": parse_number,
    "date": parse_date,
    "yes_no": parse_yes_no,
    "choice": parse_choice,
    "regex": parse_regex,
    "free_text": parse_free_text,
}


def parse_answer(text: str, node: CollectNode) -> Any:
    """The value ``text`` gives for ``node`` (None when it does not fit its kind)."""
    return PARSERS[node.kind](text[:4000], node)
