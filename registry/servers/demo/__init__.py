"""Demo data that `manage.py load_demo` imports, so a fresh installation's admin is not empty."""
