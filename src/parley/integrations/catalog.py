"""The providers an organization can connect: presets with their real endpoints, and custom ones.

A preset (``google``, ``microsoft``) knows its endpoints and default scopes; the organization only
brings its client id and secret. Any other provider key names a *custom* (generic) OAuth2 provider
whose endpoints and scopes the organization configures itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

TokenAuthMethod = Literal["client_secret_basic", "client_secret_post"]

PROVIDER_KEY = re.compile(r"^[a-z][a-z0-9_-]{1,39}$")
GENERIC = "generic"


@dataclass(frozen=True)
class ProviderPreset:
    key: str
    name: str
    description: str
    authorize_url: str
    token_url: str
    revocation_url: str | None
    default_scopes: tuple[str, ...]
    token_auth_method: TokenAuthMethod
    # Sent with every authorization request (e.g. Google only returns a refresh token when asked).
    authorize_params: dict[str, str] = field(default_factory=dict)
    docs_url: str | None = None
    # Microsoft's endpoints name a tenant (``common``, ``organizations`` or a directory id).
    default_tenant: str | None = None

    def endpoints(self, tenant: str | None = None) -> tuple[str, str, str | None]:
        tenant = tenant or self.default_tenant or ""
        return (
            self.authorize_url.format(tenant=tenant),
            self.token_url.format(tenant=tenant),
            self.revocation_url.format(tenant=tenant) if self.revocation_url else None,
        )


PRESETS: dict[str, ProviderPreset] = {
    "google": ProviderPreset(
        key="google",
        name="Google",
        description="Google accounts (Calendar, Gmail, Sheets...) through Google's OAuth 2.0 endpoints.",
        authorize_url="https://accounts.google.com/o/oauth2/v2/auth",
        token_url="https://oauth2.googleapis.com/token",  # noqa: S106
        revocation_url="https://oauth2.googleapis.com/revoke",
        default_scopes=("openid", "email", "profile"),
        token_auth_method="client_secret_post",  # noqa: S106
        authorize_params={"access_type": "offline", "prompt": "consent", "include_granted_scopes": "true"},
        docs_url="https://developers.google.com/identity/protocols/oauth2/web-server",
    ),
    "microsoft": ProviderPreset(
        key="microsoft",
        name="Microsoft",
        description="Microsoft Entra ID accounts (Outlook, Teams, OneDrive...) through the v2.0 endpoints.",
        authorize_url="https://login.microsoftonline.com/{tenant}/oauth2/v2.0/authorize",
        token_url="https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token",  # noqa: S106
        revocation_url=None,
        default_scopes=("openid", "profile", "email", "offline_access", "User.Read"),
        token_auth_method="client_secret_post",  # noqa: S106
        docs_url="https://learn.microsoft.com/entra/identity-platform/v2-oauth2-auth-code-flow",
        default_tenant="common",
    ),
}


def is_valid_key(key: str) -> bool:
    return bool(PROVIDER_KEY.fullmatch(key))
