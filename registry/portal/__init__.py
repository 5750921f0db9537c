"""The team portal: where team members sign in, see and ask for tools, and connect their agents."""
