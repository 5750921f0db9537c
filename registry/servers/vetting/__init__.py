"""Vetting what a server offers: the description scanner and syncing its tool list."""
