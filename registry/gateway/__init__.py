"""The gateway's control plane: call checks, per-server gateway policy and the audit of calls."""
