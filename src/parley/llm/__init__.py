"""LLM access: an OpenAI-compatible client, the chat route and token usage records."""
