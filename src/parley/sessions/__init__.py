"""Live conversations: create a session from a flow, exchange messages, end it, toggle spoken output."""
