"""What the people and orchestrators running Toolroom use: `/healthz`, `/readyz`, `/metrics`, the
`probe` and `rotate_secrets_key` commands. An entry point above every other app: it reads them
all, and none of them imports it."""
