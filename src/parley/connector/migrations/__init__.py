"""Alembic migrations of the connector's own database (version table ``connector_alembic_version``)."""
