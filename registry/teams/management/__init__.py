"""Management commands for operators who script teams, grants and agent tokens."""
