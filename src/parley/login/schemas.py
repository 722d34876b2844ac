from __future__ import annotations

from pydantic import BaseModel, Field


class LoginOptions(BaseModel):
    """Whether the console can offer "Sign in with <provider>", and where that starts."""

    enabled: bool = Field(description="Whether an identity provider's login is configured.")
    provider: str | None = Field(description="The provider's name as shown on the button.")
    start_path: str | None = Field(description="Open this path in the browser to sign in.")


class LoginToken(BaseModel):
    """The platform token of a finished sign-in (handed over once)."""

    token: str = Field(description="A Parley login JWT for the provider's subject; send it as Bearer.")
    token_type: str = "Bearer"  # noqa: S105 (the scheme)
    expires_in: int = Field(description="Seconds the token is valid.")
    subject: str = Field(description="The subject the token is for (the provider's `sub`).")
