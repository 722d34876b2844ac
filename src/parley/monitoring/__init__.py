"""Monitoring: the call history with typed filters."""
