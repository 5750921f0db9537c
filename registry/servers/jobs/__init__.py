"""Running servers as the registry sees them: discovery, health, warm runtimes, launch plans and
the sandbox's images and readiness."""
