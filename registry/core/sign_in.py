"""Sign-in lockout: django-axes behind Django's `authenticate`, so every sign-in page is covered.

Axes counts failed sign-ins (by user name and client address) through the `user_login_failed`
signal that `django.contrib.auth.authenticate` sends, and its backend refuses a locked-out pair
before any password is checked. The admin's login, and any other page that signs people in with
`authenticate(request, ...)`, therefore lock out alike. Without a request (a management command,
the test client's `login()`) there is no client address to count by: those calls pass through.
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend  # type: ignore[import-untyped]
from django.http import HttpRequest


class SignInLockoutBackend(AxesStandaloneBackend):
    def authenticate(  # type: ignore[no-untyped-def]
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ):
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)
