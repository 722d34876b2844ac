"""The voice pipeline's engines: speech-to-text, text-to-speech, voice activity detection, codecs."""
