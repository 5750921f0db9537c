"""Object ids taken from the admin's own URLs: anything but a whole number is a 404, not a 500."""

from __future__ import annotations

from django.http import Http404


def object_id_or_404(object_id: str) -> int:
    """The primary key in `object_id`; Http404 for anything that cannot be one (`abc`, `1.5`)."""
    if not object_id.isascii() or not object_id.isdigit():
        raise Http404("No such object.")
    return int(object_id)
