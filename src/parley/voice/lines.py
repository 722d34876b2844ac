"""What a live call says on its own: failures, fillers, re-prompts and goodbyes, in German and English.

A flow's own ``fallback`` variable (the runtime's fallback line) replaces the failure lines; the rest
are built in. Other languages get the English lines.
"""

from __future__ import annotations

from dataclasses import dataclass

_BUILT_IN: dict[str, dict[str, str]] = {
    "de": {
        "failure": "Entschuldigung, das hat gerade nicht geklappt. Bitte versuchen Sie es noch einmal.",
        "not_heard": "Entschuldigung, ich habe Sie nicht verstanden. Bitte sagen Sie es noch einmal.",
        "filler": "Einen Moment bitte, ich sehe nach.",
        "filler_again": "Einen Moment noch.",
        "reprompt": "Sind Sie noch da?",
        "goodbye_silent": "Ich höre Sie leider nicht. Bitte rufen Sie noch einmal an. Auf Wiederhören!",
        "goodbye_failure": (
            "Es tut mir leid, wir haben gerade technische Probleme. Bitte rufen Sie später noch einmal an. "
            "Auf Wiederhören!"
        ),
    },
    "en": {
        "failure": "Sorry, that did not work just now. Please try again.",
        "not_heard": "Sorry, I did not catch that. Please say it again.",
        "filler": "One moment please, let me check.",
        "filler_again": "Just a moment more.",
        "reprompt": "Are you still there?",
        "goodbye_silent": "I cannot hear you, sorry. Please call again. Goodbye!",
        "goodbye_failure": (
            "I am sorry, we have a technical problem right now. Please call again later. Goodbye!"
        ),
    },
}


@dataclass(frozen=True)
class SpokenLines:
    """The lines one call speaks without a turn of the flow."""

    failure: str
    not_heard: str
    filler: str
    filler_again: str
    reprompt: str
    goodbye_silent: str
    goodbye_failure: str

    @classmethod
    def for_language(cls, language: str | None, fallback: str | None = None) -> SpokenLines:
        """The built-in lines of ``language`` (English for others); ``fallback`` replaces ``failure``."""
        lines = _BUILT_IN.get((language or "en")[:2].lower(), _BUILT_IN["en"])
        chosen = dict(lines)
        if fallback and fallback.strip():
            chosen["failure"] = fallback.strip()
        return cls(**chosen)
