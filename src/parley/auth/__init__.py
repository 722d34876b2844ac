"""Authentication (JWT bearer tokens, JWKS, platform API keys) and the caller's organization context."""
