"""The append-only audit trail: every admin decision and every gateway call."""
