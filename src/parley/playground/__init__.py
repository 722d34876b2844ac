"""The browser playground: talk to a flow with the microphone or by typing (``GET /playground``)."""
