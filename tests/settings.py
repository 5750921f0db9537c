"""Settings for the test suite: Toolroom's settings in the test profile unless told otherwise."""

import os

os.environ.setdefault("TOOLROOM_PROFILE", "test")

from registry.settings import *  # noqa: F403
