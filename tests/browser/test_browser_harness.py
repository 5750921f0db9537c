"""The browser harness itself: signing in works, and the page notices what goes wrong."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.browser.conftest import PageProblems, sign_in
from tests.factories import UserFactory


def test_an_admin_signs_in_through_the_login_form(page: Page, transactional_db):
    UserFactory(username="alice", is_staff=True, is_superuser=True)

    sign_in(page, "alice")

    expect(page.locator("#user-tools")).to_contain_text("alice")
    expect(page).to_have_title(re.compile("Toolroom"))


def test_a_wrong_password_is_refused_on_the_form(page: Page, transactional_db):
    UserFactory(username="alice", is_staff=True, is_superuser=True)
    page.goto("/admin/login/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Log in").click()

    expect(page.locator(".errornote")).to_contain_text("correct username and password")
    assert "/admin/login/" in page.url


def test_the_page_records_console_errors_and_error_responses(
    page: Page, page_problems: PageProblems, live_server
):
    page.goto("/admin/login/")
    page.evaluate("console.error('something broke')")
    page.goto("/static/admin/css/no-such-file.css")

    assert any("something broke" in text for text in page_problems.console_errors)
    assert page_problems.http_errors == [
        f"404 GET {live_server.url}/static/admin/css/no-such-file.css"
    ]
    # Both were provoked on purpose: clear them so the fixture does not fail this test.
    page_problems.console_errors.clear()
    page_problems.http_errors.clear()


def test_an_expected_error_response_is_not_a_problem(
    page: Page, page_problems: PageProblems, live_server
):
    page_problems.expect_status(404, r"/static/admin/css/no-such-file\.css$")
    page.goto("/static/admin/css/no-such-file.css")

    assert page_problems.http_errors == []
