"""Signing in to the console through an identity provider (OAuth 2.0 / OpenID Connect, code + PKCE)."""
