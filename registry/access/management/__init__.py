"""Management commands of the access rules."""
