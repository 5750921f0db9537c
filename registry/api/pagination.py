"""Pagination for the lists that can grow long: `?limit=` and `?offset=`, with a hard maximum."""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination


class TeamListPagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 200
