"""Usage per period: calls, minutes, tokens, TTS characters, STT seconds."""
