"""Platform administration: routes for platform admins only."""
