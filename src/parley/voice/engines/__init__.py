"""Speech engines behind small interfaces (see :mod:`parley.voice.engines.base`)."""
