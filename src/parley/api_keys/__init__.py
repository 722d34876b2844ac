"""Platform API keys: organization-scoped bearer credentials for scripts and servers."""
