"""Management commands for the people running Toolroom."""
