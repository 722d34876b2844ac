"""Notifications: channels (webhook, email, Slack), rules from brain signals to channels, delivery."""
