"""Post-call analysis: a summary and the fields a flow's ``analysis`` block declares (docs/calls.md).

After a call is stored, the ``calls.analyze`` job (:mod:`parley.calls.tasks`) works it out:

- **with the organization's LLM** (an ``openai`` provider): the transcript and the flow's variables go
  to the model with the field schema and a strict JSON-output prompt; the answer is checked field by
  field against its type. A field the model leaves out or answers with the wrong type takes the value
  the deterministic method finds; a model that fails altogether (error, time-out, no JSON) leaves the
  whole analysis to the deterministic method, and the call says ``analysis_method: variables``.
- **without one** (or as that fallback), deterministically: each field is the flow variable of the same
  name (or the one its ``variable`` names), converted to the declared type, null when missing or not
  convertible; the "summary" is a factual digest of the record (direction, channel, who, how long, how
  it ended, the caller's first words, the collected values), not a written summary of what was meant.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession

from parley.calls.models import Call
from parley.flows.definition import AnalysisField, AnalysisSettings
from parley.flows.models import Flow, FlowVersion
from parley.kit.orgcache import cached_item, watch

ANALYZE_JOB = "calls.analyze"
USAGE_SOURCE = "analysis"
MAX_TRANSCRIPT_CHARS = 12000
MAX_TURN_CHARS = 1000
MAX_SUMMARY_CHARS = 2000
MAX_TEXT_VALUE = 500
_TRUE = {"true", "yes", "ja", "y", "j", "1", "on", "wahr"}
_FALSE = {"false", "no", "nein", "n", "0", "off", "falsch"}
_OBJECT = re.compile(r"\{.*\}", re.S)

SYSTEM_PROMPT = """\
You analyse a finished phone call between a caller and an AI agent of a business.
Sie analysieren ein beendetes Telefonat zwischen einem Anrufer und einem KI-Agenten.
Write the summary in the language of the call. Only state what the conversation says; never invent.
Answer with exactly one JSON object and nothing else (no prose, no code fence):
{"summary": "<2 to 4 sentences, or null when no summary is asked for>", "fields": {<one entry per field \
below: the value, or null when the call does not say>}}"""


# Read at the end of every call: built once, bound per call.
_VERSION_DEFINITION = select(FlowVersion.definition).where(
    FlowVersion.organization_id == bindparam("organization_id"),
    FlowVersion.flow_id == bindparam("flow_id"),
    FlowVersion.version == bindparam("version"),
)
_DRAFT_DEFINITION = select(Flow.definition).where(
    Flow.organization_id == bindparam("organization_id"), Flow.id == bindparam("flow_id")
)


# The analysis blocks of published versions, per organization (kit/orgcache.py): a published version
# never changes, so only deleting a flow (its versions) drops them; a draft is read every time.
_SPECS = "calls.analysis_specs"
watch(_SPECS, FlowVersion)


async def spec_of(
    session: AsyncSession, organization_id: str, flow_id: str | None, version: int | None
) -> AnalysisSettings | None:
    """The ``analysis`` block of the flow version the call ran (the draft for a test session)."""
    if flow_id is None:
        return None
    if version is not None:

        async def load() -> AnalysisSettings | None:
            return _spec(
                await session.scalar(
                    _VERSION_DEFINITION,
                    {"organization_id": organization_id, "flow_id": flow_id, "version": version},
                )
            )

        return await cached_item(session, _SPECS, organization_id, (flow_id, version), load)
    return _spec(
        await session.scalar(_DRAFT_DEFINITION, {"organization_id": organization_id, "flow_id": flow_id})
    )


def _spec(definition: Any) -> AnalysisSettings | None:
    block = (definition or {}).get("analysis") if isinstance(definition, dict) else None
    if not block:
        return None
    try:
        return AnalysisSettings.model_validate(block)
    except ValidationError:  # validated when saved; an unreadable block means no analysis
        return None


# --- values ----------------------------------------------------------------------------------------


def coerce(spec: AnalysisField, value: Any) -> Any:
    """``value`` as the field's type, or None when it is missing or cannot be read as that type."""
    if value is None:
        return None
    if spec.type == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float):
            return bool(value)
        text = str(value).strip().casefold()
        return True if text in _TRUE else False if text in _FALSE else None
    if spec.type in ("int", "number"):
        if isinstance(value, bool):
            return None
        try:
            number = float(str(value).strip().replace(",", ".")) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            return None
        if not math.isfinite(number):
            return None
        if spec.type == "int":
            return int(number) if number.is_integer() else None
        return int(number) if number.is_integer() else number
    if spec.type == "enum":
        text = str(value).strip().casefold()
        return next((v for v in spec.values or [] if v.casefold() == text), None)
    if isinstance(value, dict | list):
        return None
    text = str(value).strip().replace("\x00", "")
    return text[:MAX_TEXT_VALUE] or None


def canonical(value: Any) -> str | None:
    """The text the call list filter compares: "true"/"false", numbers without a trailing ".0",
    anything else stripped and lower-cased."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    text = str(value).strip().casefold()
    if text in ("true", "false"):
        return text
    try:
        number = float(text)
    except ValueError:
        return text
    if math.isfinite(number) and not text.startswith(("0x", "+")) and re.fullmatch(r"-?\d+(\.\d+)?", text):
        return str(int(number)) if number.is_integer() else repr(number)
    return text


def index_of(extracted: dict[str, Any]) -> dict[str, str]:
    return {name: text for name, value in extracted.items() if (text := canonical(value)) is not None}


# --- the deterministic method ----------------------------------------------------------------------


def from_variables(spec: AnalysisSettings, variables: dict[str, Any]) -> dict[str, Any]:
    return {name: coerce(field, variables.get(field.variable or name)) for name, field in spec.fields.items()}


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def digest(call: Call, extracted: dict[str, Any]) -> str:
    """The deterministic summary: facts of the record, in English, never an interpretation."""
    who = f" from {call.caller}" if call.caller else ""
    parts = [
        f"{call.direction.capitalize()} {call.channel} call{who}, {_duration(call.duration_seconds)}, "
        f"{call.turn_count} turns, outcome {call.outcome}"
        + (f" ({call.end_reason})" if call.end_reason else "")
        + "."
    ]
    first = next(
        (str(t.get("text") or "").strip() for t in call.transcript if t.get("speaker") == "caller"), ""
    )
    if first:
        parts.append(f'The caller first said: "{first[:200]}".')
    if call.transferred_to:
        parts.append(f"Transferred to {call.transferred_to} ({call.transfer_status or 'unknown'}).")
    known = [f"{name}={value}" for name, value in extracted.items() if value is not None]
    if known:
        parts.append("Collected: " + ", ".join(known) + ".")
    return " ".join(parts)[:MAX_SUMMARY_CHARS]


# --- the LLM method --------------------------------------------------------------------------------


def _field_lines(spec: AnalysisSettings) -> str:
    lines = []
    for name, field in spec.fields.items():
        kind = {"bool": "true or false", "str": "a short text", "int": "a whole number", "number": "a number"}
        what = (
            "one of " + ", ".join(json.dumps(v) for v in field.values or [])
            if field.type == "enum"
            else kind[field.type]
        )
        lines.append(f"- {name}: {what}" + (f" — {field.description}" if field.description else ""))
    return "\n".join(lines) or "(no fields)"


def conversation_text(call: Call) -> str:
    lines = [
        f"{'Caller' if t.get('speaker') == 'caller' else 'Agent'}: "
        f"{str(t.get('text') or '').strip()[:MAX_TURN_CHARS]}"
        for t in call.transcript
        if str(t.get("text") or "").strip()
    ]
    kept: list[str] = []
    size = 0
    for line in lines:  # the beginning of a very long call is kept: it says what the call was about
        if size + len(line) > MAX_TRANSCRIPT_CHARS and kept:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept)


def request_payload(model: str, spec: AnalysisSettings, call: Call) -> dict[str, Any]:
    variables = json.dumps(call.variables, ensure_ascii=False, default=str)[:4000]
    user = (
        f"Summary wanted: {'yes' if spec.summary else 'no'}\n"
        f"Fields:\n{_field_lines(spec)}\n\n"
        f"Variables the agent collected: {variables}\n\n"
        f"Conversation:\n{conversation_text(call)}"
    )
    return {
        "model": model,
        "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
        "temperature": 0,
        "max_tokens": 600,
    }


@dataclass(frozen=True)
class ModelAnswer:
    summary: str | None
    fields: dict[str, Any]


def parse_answer(content: str | None, spec: AnalysisSettings) -> ModelAnswer | None:
    """The model's JSON object, checked; None when it is not the object asked for. Fields with a value
    of the wrong type are left out (the caller fills them in deterministically)."""
    if not content:
        return None
    match = _OBJECT.search(content)
    if match is None:
        return None
    try:
        data = json.loads(match.group(0))
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    summary = data.get("summary")
    if spec.summary and not (isinstance(summary, str) and summary.strip()):
        return None
    given = data.get("fields")
    raw: dict[str, Any] = given if isinstance(given, dict) else {}
    fields: dict[str, Any] = {}
    for name, field in spec.fields.items():
        if name not in raw:
            continue
        value = raw[name]
        if value is None:
            fields[name] = None
            continue
        typed = coerce(field, value)
        # The model must answer in the type asked for (a bool as true/false, not "maybe").
        if typed is not None and not (field.type == "bool" and not isinstance(value, bool)):
            fields[name] = typed
    text = str(summary).strip().replace("\x00", "")[:MAX_SUMMARY_CHARS] if spec.summary else None
    return ModelAnswer(text, fields)
