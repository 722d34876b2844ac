"""The real-time voice pipeline: frames, stages and barge-in (see docs/voice.md, "Pipeline")."""
