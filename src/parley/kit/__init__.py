"""Shared kit: database, errors, ids, pagination, body parsing, crypto, logging and middleware."""
