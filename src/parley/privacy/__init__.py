"""Privacy: redaction of personal data, retention, per-call and per-caller deletion and export, the recording notice."""
