"""The operator console: a static single-page app served at ``/console`` (docs/console.md)."""
