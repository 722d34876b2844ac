"""Call events: signed webhooks to the organization's own systems (docs/webhooks.md)."""
