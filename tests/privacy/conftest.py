"""Privacy fixtures: call records stored the way the runtime stores them (tests/calls)."""

from tests.calls.conftest import record

__all__ = ["record"]
