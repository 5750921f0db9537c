"""Sections of registry/settings.py, which imports them (DJANGO_SETTINGS_MODULE is unchanged)."""
