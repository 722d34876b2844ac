"""Providers: the catalog of LLM, speech, telephony and email providers and their per-organization configuration."""
