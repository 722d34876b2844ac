"""Organizations (tenants) and their members."""
