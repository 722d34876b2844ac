"""Assets (files in blob storage) and avatar uploads."""
