"""The conversation runtime: the flow engine and its ports (tools, knowledge, LLM)."""
