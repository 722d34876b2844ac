"""Audit events: who did what to which resource, in which organization, when and from where."""
