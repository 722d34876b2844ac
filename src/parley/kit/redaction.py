"""Redaction of personal data in text: phone numbers, e-mail addresses, IBANs, card numbers, custom patterns.

No domain knowledge here: :class:`Redactor` is built from plain values (which kinds, their replacement,
an organization's own patterns), so the privacy settings (``parley.privacy``), the conversation
runtime and the log processor (``parley.kit.logging``) share one implementation.

The rules (docs/privacy.md says the same):

- **phone**: a number that starts with ``+`` or ``00`` (international) or with a trunk ``0`` followed
  by a non-zero digit and at least one more digit before any separator (German national form:
  ``0171 1234567``, ``030/123456``, ``(030) 123456``), optionally with ``(0)`` after the country code
  (``+49 (0)30 123456``); digits may be separated by single spaces, ``-`` or ``/``; 8 to 15 digits in
  all. A digit string that starts with any other digit is **never** a phone number, so order numbers,
  amounts, postcodes, years and times stay readable (``4711``, ``A-1001``, ``10115``, ``12345678``).
- **email**: ``local@domain.tld``.
- **iban**: two letters, two check digits, then 11 to 30 letters or digits, in groups separated by
  single spaces or not (``DE89 3704 0044 0532 0130 00``), any case (speech recognisers write lowercase).
- **card**: 13 to 19 digits, optionally in groups separated by single spaces or ``-``, that pass the
  Luhn check (a 16-digit order number that fails it is kept).
- **custom**: an organization's own regular expressions (the ``regex`` module), each matched with a
  time limit; a pattern that runs out of time replaces the *whole* text by its replacement (failing
  closed: redaction never stalls a call and never lets the text through unchecked).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import regex

Kind = Literal["phone", "email", "iban", "card"]
KINDS: tuple[Kind, ...] = ("phone", "email", "iban", "card")
DEFAULT_REPLACEMENTS: dict[str, str] = {
    "phone": "[phone]",
    "email": "[email]",
    "iban": "[iban]",
    "card": "[card]",
}

# How long one custom pattern may search one text (seconds).
CUSTOM_TIMEOUT = 0.05
# Texts a new custom pattern is tried on before it is accepted (catastrophic backtracking shows here).
_PROBES = (
    "a" * 40 + "!",
    "0" * 40 + "x",
    " " * 40 + "x",
    "ab" * 30 + "!",
    "Meine Nummer ist 0171 1234567, meine E-Mail max@example.de." * 4,
)

_SEP = r"[ \-/]"
_DIGITS = r"\d+(?:" + _SEP + r"\d+)*"  # digit groups, one separator between them (no backtracking blow-up)
_PHONE = re.compile(
    r"(?<![\w+])"
    r"(?:"
    # international: +49 … or 0049 …, optionally with (0) after the country code
    r"(?:\+|00)[1-9]\d{0,2}(?:" + _SEP + r"?\(0\))?" + _SEP + r"?" + _DIGITS + r""
    r"|"
    # national, with the area code in parentheses: (030) 123456
    r"\(0[1-9]\d{1,4}\)" + _SEP + r"?" + _DIGITS + r""
    r"|"
    # national: 0171 1234567, 030/123456, 030-123456, 01711234567
    r"0[1-9]\d+(?:" + _SEP + r"\d+)*"
    r")"
    r"(?!\d)"
)
_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
# groups of four (spaced or not), the last one shorter
_IBAN = re.compile(
    r"(?<![A-Za-z0-9])[A-Za-z]{2}\d{2}(?: ?[A-Za-z0-9]{4}){2,7}(?: ?[A-Za-z0-9]{1,4})?(?![A-Za-z0-9])"
)
_CARD = re.compile(r"(?<![\d+])\d(?:[ \-]?\d){12,18}(?!\d)")


def luhn_valid(digits: str) -> bool:
    """The Luhn (mod 10) check of a card number given as digits only."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if position % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _digit_count(text: str) -> int:
    return sum(1 for c in text if c.isdigit())


def _phone(replacement: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        text = match.group(0)
        return replacement if 8 <= _digit_count(text) <= 15 else text

    return replace


def _card(replacement: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        digits = "".join(c for c in match.group(0) if c.isdigit())
        return replacement if luhn_valid(digits) else match.group(0)

    return replace


def _iban(replacement: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        # an IBAN has digits after its check digits; a long word that happens to start like one does not
        body = match.group(0)[4:]
        return replacement if _digit_count(body) >= 6 else match.group(0)

    return replace


class PatternError(ValueError):
    """A custom pattern that is not a valid regular expression, or that is too slow to use."""


@dataclass(frozen=True)
class CustomPattern:
    name: str
    pattern: str
    replacement: str


def compile_custom(pattern: str) -> regex.Pattern[str]:
    """Compile an organization's pattern; raises :class:`PatternError` with a sentence saying why not.

    The pattern is tried on a few hostile texts with the time limit: one that backtracks
    catastrophically is refused here rather than discovered during a call."""
    try:
        compiled = regex.compile(pattern)
    except (regex.error, TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise PatternError(f"not a valid regular expression ({exc})") from exc
    if compiled.fullmatch("") is not None:
        raise PatternError("matches the empty text, so it would redact nothing useful")
    for probe in _PROBES:
        try:
            compiled.search(probe, timeout=CUSTOM_TIMEOUT)
        except TimeoutError as exc:
            raise PatternError(
                "takes too long to match (catastrophic backtracking); simplify nested repetitions"
            ) from exc
    return compiled


@dataclass
class Redactor:
    """Replaces personal data in texts and in JSON-like values (dicts, lists, strings)."""

    kinds: tuple[Kind, ...] = KINDS
    replacements: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_REPLACEMENTS))
    custom: tuple[CustomPattern, ...] = ()
    timeout: float = CUSTOM_TIMEOUT
    _steps: list[Callable[[str], str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        def replacement(kind: Kind) -> str:
            return self.replacements.get(kind) or DEFAULT_REPLACEMENTS[kind]

        steps: list[Callable[[str], str]] = []
        for item in self.custom:
            steps.append(self._custom_step(item))
        # IBANs and e-mail addresses first: their digits must not be taken for phone or card numbers.
        if "iban" in self.kinds:
            steps.append(_sub(_IBAN, _iban(replacement("iban"))))
        if "email" in self.kinds:
            steps.append(_sub(_EMAIL, replacement("email")))
        if "card" in self.kinds:
            steps.append(_sub(_CARD, _card(replacement("card"))))
        if "phone" in self.kinds:
            steps.append(_sub(_PHONE, _phone(replacement("phone"))))
        self._steps = steps

    def _custom_step(self, item: CustomPattern) -> Callable[[str], str]:
        compiled = regex.compile(item.pattern)
        timeout = self.timeout

        def literal(_match: Any) -> str:
            return item.replacement  # taken as written: no group references

        def step(text: str) -> str:
            try:
                result: str = compiled.sub(literal, text, timeout=timeout)
            except TimeoutError:
                return item.replacement
            return result

        return step

    @property
    def active(self) -> bool:
        return bool(self._steps)

    def text(self, value: str) -> str:
        for step in self._steps:
            value = step(value)
        return value

    def value(self, value: Any) -> Any:
        """``value`` with every string in it redacted (dict keys are kept)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value


def _sub(pattern: re.Pattern[str], replacement: str | Callable[[re.Match[str]], str]) -> Callable[[str], str]:
    def step(text: str) -> str:
        return pattern.sub(replacement, text)

    return step


def redactor(
    kinds: Iterable[str] = KINDS,
    replacements: Mapping[str, str] | None = None,
    custom: Iterable[CustomPattern] = (),
) -> Redactor:
    chosen = tuple(k for k in KINDS if k in set(kinds))
    return Redactor(chosen, dict(replacements or DEFAULT_REPLACEMENTS), tuple(custom))
