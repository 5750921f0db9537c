"""The review queue shows each person only the work they may see."""

from __future__ import annotations

import pytest

from registry.teams.review_queue import review_queue

pytestmark = pytest.mark.django_db


def _sections(user):
    return [section.title for section in review_queue(user=user).sections]


def test_the_admin_sees_every_kind_of_work(alice):
    assert _sections(alice) == ["Servers", "Tools of servers in review or in use", "Access"]


def test_a_reviewer_without_access_requests_sees_servers_and_tools_only(bob):
    assert _sections(bob) == ["Servers", "Tools of servers in review or in use"]


def test_someone_without_admin_permissions_sees_nothing(charlie):
    queue = review_queue(user=charlie)
    assert queue.sections == []
    assert queue.changed_tools == []
