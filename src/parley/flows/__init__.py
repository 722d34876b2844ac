"""Flows: an agent as a versioned graph of nodes (say, collect, tool, branch, llm, knowledge...)."""
