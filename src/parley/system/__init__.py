"""Health, readiness, metrics and system information."""
