"""OAuth2 integrations: provider catalog, connect flow with state + PKCE, stored tokens and refresh."""
