"""Pieces every Toolroom app shares: errors, encrypted fields, network guard, canonical JSON."""
