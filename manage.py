#!/usr/bin/env python
"""Django's command-line entry point for Toolroom."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "registry.settings")
    from django.conf import settings  # noqa: PLC0415
    from django.core.exceptions import ImproperlyConfigured  # noqa: PLC0415
    from django.core.management import execute_from_command_line  # noqa: PLC0415

    try:
        settings.INSTALLED_APPS  # noqa: B018 (loads the settings: a missing one is said here)
    except ImproperlyConfigured as exc:
        # An operator's mistake in the environment: one line saying what to set, not a traceback.
        hint = ""
        if "TOOLROOM_PROFILE" not in os.environ:
            hint = (
                " (TOOLROOM_PROFILE is not set, so the production profile applies; "
                "TOOLROOM_PROFILE=quickstart works on the database `make run` made in var/)"
            )
        sys.exit(f"manage.py: {exc}{hint}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
