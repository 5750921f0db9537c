"""Toolroom's test suite."""
