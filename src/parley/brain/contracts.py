"""What the brain reads, declared by the brain: ``calls`` (which builds on the brain) provides it.

:class:`FinishedConversation` is what the rules judge; ``parley.calls.contracts.CallRecordIn`` is one.
:class:`SignalledCalls` is how the brain's background jobs read a stored call and mark it as
signalled; ``parley.calls.service.CallsForTheBrain`` implements it. The brain never imports calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncSession


class Turn(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def speaker(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def at(self) -> datetime: ...


class ToolCall(Protocol):
    @property
    def tool_id(self) -> str | None: ...
    @property
    def tool_name(self) -> str: ...
    @property
    def arguments(self) -> dict[str, Any]: ...
    @property
    def status(self) -> str: ...
    @property
    def http_status(self) -> int | None: ...
    @property
    def latency_ms(self) -> float: ...
    @property
    def result(self) -> Any: ...
    @property
    def error(self) -> str | None: ...


class ConversationSignal(Protocol):
    """A signal the conversation raised itself (a flow's signal node, the runtime)."""

    @property
    def type(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def details(self) -> dict[str, Any]: ...
    @property
    def at(self) -> datetime: ...


class FinishedConversation(Protocol):
    @property
    def transcript(self) -> Sequence[Turn]: ...
    @property
    def tool_calls(self) -> Sequence[ToolCall]: ...
    @property
    def signals(self) -> Sequence[ConversationSignal]: ...
    @property
    def outcome(self) -> str: ...
    @property
    def transferred_to(self) -> str | None: ...
    @property
    def ended_at(self) -> datetime: ...


@dataclass(frozen=True)
class CallFacts:
    """What the brain's background jobs read of a stored call."""

    id: str
    organization_id: str
    flow_id: str | None
    ended_at: datetime
    transcript: list[dict[str, Any]]
    # False for the console's test conversations: their signals send no ``signal.raised`` event
    sends_events: bool = True


class SignalledCalls(Protocol):
    """The calls a background job of the brain may read and mark as signalled."""

    async def facts(self, session: AsyncSession, call_id: str) -> CallFacts | None: ...

    async def note_signal(self, session: AsyncSession, call_id: str, signal_type: str) -> None: ...
