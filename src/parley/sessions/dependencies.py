"""HTTP glue of the conversation: the process's live-session registry held in the app's state."""

from __future__ import annotations

from starlette.datastructures import State

from parley.sessions.registry import LiveRegistry, LocalRegistry


def registry_for(state: State) -> LiveRegistry:
    """The app's registry (``app.state.live_sessions``); a local one when the lifespan did not run."""
    found: LiveRegistry | None = getattr(state, "live_sessions", None)
    if found is None:
        found = LocalRegistry()
        state.live_sessions = found
    return found
