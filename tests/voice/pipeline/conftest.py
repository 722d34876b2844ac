"""The live-server fixtures of the voice transport tests (see livevoice.py)."""

from tests.voice.pipeline.livevoice import database_url, live

__all__ = ["database_url", "live"]
