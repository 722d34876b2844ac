"""Parley: an open-source platform for building, running and operating AI phone agents."""

__version__ = "0.1.0"
