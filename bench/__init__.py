"""Benchmarks: scripts that measure Toolroom on this machine, not timed tests."""
