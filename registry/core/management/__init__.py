"""Management commands of Toolroom's shared core."""
