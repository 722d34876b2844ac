"""Adapters for the telephony providers: LiveKit (SIP over Twirp) and Twilio (REST)."""

from __future__ import annotations


class ProviderFailure(Exception):
    """The provider could not be reached or refused the request; ``reason`` is safe to show."""

    def __init__(self, provider: str, reason: str, *, status: int | None = None) -> None:
        super().__init__(f"{provider}: {reason}")
        self.provider = provider
        self.reason = reason
        self.status = status

    @property
    def not_found(self) -> bool:
        return self.status == 404
