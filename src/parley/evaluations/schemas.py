"""Scenarios (the items of a test suite) and the evaluation API's bodies."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from parley.kit.schemas import StrictModel
from parley.kit.toolcalls import ToolStatus

MAX_SUITE_SCENARIOS = 1000
MAX_PATTERN_CHARS = 500
CHECKABLE_LANGUAGES = ("de", "en")
Outcome = Literal["completed", "transferred", "failed", "abandoned"]
ResultStatus = Literal["pending", "passed", "failed", "skipped", "error"]
RunStatus = Literal["queued", "running", "completed", "cancelled"]


class TextCheck(StrictModel):
    """One check of the agent's words: exactly one of the fields."""

    contains: str | None = Field(default=None, min_length=1, max_length=1000)
    not_contains: str | None = Field(default=None, min_length=1, max_length=1000)
    matches: str | None = Field(
        default=None, min_length=1, max_length=MAX_PATTERN_CHARS, description="A Python regular expression."
    )
    language: str | None = Field(
        default=None, description="'flow' (the conversation's language), 'de' or 'en'."
    )

    @model_validator(mode="after")
    def _one(self) -> TextCheck:
        given = [
            k for k in ("contains", "not_contains", "matches", "language") if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError("a check has exactly one of contains, not_contains, matches or language")
        if self.matches is not None:
            try:
                re.compile(self.matches)
            except re.error as exc:
                raise ValueError(
                    f"the pattern {self.matches!r} is not a valid regular expression ({exc})"
                ) from exc
        if self.language is not None and self.language not in ("flow", *CHECKABLE_LANGUAGES):
            raise ValueError("language checks know 'flow', 'de' and 'en'")
        return self

    def describe(self) -> str:
        for key in ("contains", "not_contains", "matches", "language"):
            value = getattr(self, key)
            if value is not None:
                return f"{key} {value!r}"
        return ""  # pragma: no cover - the validator guarantees one


class BargeIn(StrictModel):
    """Voice mode: the caller speaks over the agent's reply (to the turn before) ``after_ms`` after it
    began, instead of waiting for the agent to finish."""

    after_ms: int = Field(ge=0, le=30000)


class VoiceChecks(StrictModel):
    """Voice mode's expectations on one caller turn (text mode ignores them)."""

    agent_interrupted: bool | None = Field(
        default=None, description="The agent stopped talking because the caller spoke over it."
    )
    stopped_within_ms: int | None = Field(
        default=None, gt=0, le=10000, description="From the caller's first voiced frame to the agent's stop."
    )
    min_accuracy: float | None = Field(
        default=None, ge=0, le=1, description="The caller's words heard as said (1 - word error rate)."
    )
    agent_continued: bool | None = Field(
        default=None,
        description="The agent was not left silent: not interrupted, or it spoke again after the stop.",
    )


class CallerTurn(StrictModel):
    """The caller's side of one turn: ``say`` a line, stay silent, or (voice mode) make a noise over
    the agent; ``expect`` checks the reply, ``voice`` the turn's voice behaviour."""

    say: str | None = Field(default=None, min_length=1, max_length=4000)
    silence: bool = False
    noise_ms: int | None = Field(
        default=None,
        ge=20,
        le=2000,
        description="Voice mode: a noise burst (a cough) of this length instead of words; text mode skips it.",
    )
    barge_in: BargeIn | None = None
    expect: list[TextCheck] = Field(default_factory=list, max_length=20)
    voice: VoiceChecks | None = None

    @model_validator(mode="after")
    def _one(self) -> CallerTurn:
        chosen = (self.say is not None) + self.silence + (self.noise_ms is not None)
        if chosen != 1:
            raise ValueError(
                "a caller turn either says something (say), stays silent (silence: true) "
                "or makes a noise (noise_ms)"
            )
        if self.silence and self.barge_in is not None:
            raise ValueError("a silent turn cannot barge in; give it say or noise_ms")
        return self

    @property
    def text(self) -> str:
        return self.say or ""


class ToolMock(StrictModel):
    """What a tool answers in this scenario instead of running."""

    status: ToolStatus = Field(
        default="ok", description="``not_found`` answers like a 404: the result is kept, no error."
    )
    result: Any = None
    error: str | None = Field(default=None, max_length=1000)
    http_status: int | None = Field(default=None, ge=100, le=599)


class ToolCallCheck(StrictModel):
    tool: str = Field(min_length=1, max_length=100)
    arguments: dict[str, Any] | None = Field(
        default=None, description="These arguments (compared as text), others may be there too."
    )
    status: ToolStatus | None = None


class Range(StrictModel):
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)


class Expectations(StrictModel):
    opening: list[TextCheck] = Field(default_factory=list, max_length=20, description="The greeting turn.")
    said: list[TextCheck] = Field(
        default_factory=list, max_length=50, description="Everything the agent said, joined."
    )
    variables: dict[str, Any] = Field(default_factory=dict, description="Final values (compared as text).")
    tool_calls: list[ToolCallCheck] = Field(default_factory=list, max_length=20)
    no_tool_calls: list[str] = Field(default_factory=list, max_length=20)
    outcome: Outcome | None = None
    end_reason: str | None = Field(default=None, max_length=60)
    ends_at: str | None = Field(
        default=None, max_length=100, description="The node the conversation ends at."
    )
    visits: list[str] = Field(
        default_factory=list, max_length=50, description="Nodes that must have spoken or acted."
    )
    signals: list[str] = Field(default_factory=list, max_length=20)
    no_signals: list[str] = Field(default_factory=list, max_length=20)
    turns: int | Range | None = Field(default=None, description="Caller turns taken: a number or {min, max}.")
    max_turn_ms: float | None = Field(default=None, gt=0, description="Each turn's engine+tool+LLM time.")


class Scenario(StrictModel):
    """A caller's side of a conversation plus what must happen."""

    name: str = Field(min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    language: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[A-Z]{2})?$")
    variables: dict[str, Any] = Field(default_factory=dict)
    caller: str | None = Field(default=None, max_length=40)
    turns: list[CallerTurn] = Field(default_factory=list, max_length=50)
    mocks: dict[str, ToolMock] = Field(default_factory=dict, max_length=20)
    line: Literal["transferred", "failed", "unavailable"] = Field(
        default="transferred",
        description="What a transfer meets (no real call is ever made): a phone line whose target "
        "answers (transferred, the default), a line whose provider refuses (failed), or no phone line "
        "at all, as on a web call (unavailable).",
    )
    expect: Expectations = Field(default_factory=Expectations)
    # A simulated caller (needs the organization's LLM provider): an LLM plays persona + goal.
    persona: str | None = Field(default=None, min_length=1, max_length=2000)
    goal: str | None = Field(default=None, min_length=1, max_length=2000)
    max_turns: int = Field(default=8, ge=1, le=30)
    rubric: list[str] = Field(default_factory=list, max_length=20)

    @field_validator("rubric")
    @classmethod
    def _rubric(cls, rubric: list[str]) -> list[str]:
        if any(not item.strip() or len(item) > 500 for item in rubric):
            raise ValueError("each rubric criterion is a sentence of 1-500 characters")
        return rubric

    @model_validator(mode="after")
    def _kind(self) -> Scenario:
        simulated = self.persona is not None or self.goal is not None
        if simulated and (self.persona is None or self.goal is None):
            raise ValueError("a simulated caller needs both persona and goal")
        if simulated and self.turns:
            raise ValueError("a scenario has scripted turns or a simulated caller (persona + goal), not both")
        if self.rubric and not simulated:
            raise ValueError("a rubric is judged by the LLM for simulated callers (persona + goal) only")
        return self

    @property
    def simulated(self) -> bool:
        return self.persona is not None


# --- API bodies ------------------------------------------------------------------------------------


class SuiteIn(StrictModel):
    flow_id: str | None = Field(
        default=None, max_length=40, description="The flow the scenarios are written for (checks names)."
    )
    required_for_publish: bool = Field(
        default=False, description="Publishing flow_id needs a passing run of this suite on its draft."
    )


class SuiteOut(BaseModel):
    dataset_id: str
    name: str
    flow_id: str | None
    required_for_publish: bool
    scenario_count: int
    created_at: datetime
    updated_at: datetime


class VoiceOptions(StrictModel):
    pace: Literal["fast", "realtime"] = Field(
        default="fast",
        description="realtime: the caller's audio is streamed at the rate it is spoken (a run lasts as "
        "long as its calls); fast: the waiting is skipped, turn-taking and latency are kept.",
    )


class RunCreate(StrictModel):
    suite: str = Field(min_length=1, max_length=200, description="The suite's dataset id (ds_...) or name.")
    flow_id: str = Field(min_length=1, max_length=40)
    version: int | None = Field(default=None, ge=1, description="A published version; omit for the draft.")
    mode: Literal["text", "voice"] = "text"
    voice: VoiceOptions | None = Field(default=None, description="Voice mode's options (mode voice only).")

    @model_validator(mode="after")
    def _voice_only(self) -> RunCreate:
        if self.voice is not None and self.mode != "voice":
            raise ValueError('voice options are for voice mode; set "mode": "voice"')
        return self


class RunCounts(BaseModel):
    pending: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    error: int = 0


class RunOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    dataset_id: str
    suite_name: str
    flow_id: str
    flow_name: str
    flow_version: int | None = Field(description="None: the flow's draft.")
    definition_hash: str
    mode: str
    status: RunStatus
    passed: bool | None = Field(description="True when every scenario passed; None until the run is done.")
    total: int
    done: int = Field(description="Scenarios with a result.")
    counts: RunCounts
    summary: dict[str, Any]
    created_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class Failure(BaseModel):
    expectation: str
    expected: Any = None
    actual: Any = None
    turn: int | None = Field(default=None, description="The caller turn (1-based); 0 is the opening.")


class ResultOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    run_id: str
    item_id: str
    position: int
    name: str
    status: ResultStatus
    reason: str | None
    failures: list[Failure]
    transcript: list[dict[str, Any]]
    tool_calls: list[dict[str, Any]]
    turns: list[dict[str, Any]]
    signals: list[str]
    rubric: list[dict[str, Any]]
    variables: dict[str, Any]
    outcome: str | None
    end_reason: str | None
    duration_ms: float | None
    finished_at: datetime | None


class ScenarioChange(BaseModel):
    name: str
    item_id: str
    before: str | None
    after: str | None


class RunComparison(BaseModel):
    base: RunOut
    other: RunOut
    changed: list[ScenarioChange] = Field(
        description="Scenarios whose status differs (or exist in one run only)."
    )
    fixed: int = Field(description="Failed/error before, passed now.")
    broken: int = Field(description="Passed before, failed/error now.")
