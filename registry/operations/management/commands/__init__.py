"""The operators' commands: probe (a container's health check), rotate_secrets_key."""
