"""Tools: HTTP calls and built-in actions (order lookup, knowledge search...) that flows invoke."""
