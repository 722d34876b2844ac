"""Channels: WhatsApp accounts and their webhook, and routes from numbers, accounts and widgets to flows."""
