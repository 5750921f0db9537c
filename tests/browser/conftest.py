"""Fixtures for the browser tests: Debian's Chromium, driven by Playwright, against a live server.

A test takes `page` (a fresh browser context on pytest-django's `live_server`, signed out) and
signs someone in with `sign_in`. The page watches everything the browser sees: any console error,
uncaught page error or 4xx/5xx response fails the test, unless the test said it expects exactly
that response with `page_problems.expect_status(...)`. A failing test leaves a full-page
screenshot in var/test-screenshots/.

Chromium is Debian's `chromium` package, launched by path (`scripts/ensure-browser` installs it;
Playwright's own browser downloads are never used). A missing browser is an error, never a skip.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Playwright,
    Response,
    sync_playwright,
)

from tests.factories import UserFactory

CHROMIUM = os.environ.get("TOOLROOM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # the suite runs as root in containers, where Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOT_DIR = Path(__file__).resolve().parents[2] / "var" / "test-screenshots"
# A busy CI machine (two cores, several suites) can take seconds to render an admin page.
ACTION_TIMEOUT_MS = 20_000
PASSWORD = "correct horse battery staple"  # what tests.factories.UserFactory sets


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/browser is a browser test (`-m browser` / `-m "not browser"`)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the item, so the page fixture knows whether the test failed."""
    report = yield
    setattr(item, f"_browser_report_{report.when}", report)
    return report


@dataclass
class PageProblems:
    """What went wrong in the browser during one test: console errors and 4xx/5xx responses."""

    console_errors: list[str] = field(default_factory=list)
    http_errors: list[str] = field(default_factory=list)
    expected: list[tuple[int, re.Pattern[str]]] = field(default_factory=list)

    def expect_status(self, status: int, url_pattern: str) -> None:
        """Accept one kind of error response the test provokes on purpose (a regex on the URL)."""
        self.expected.append((status, re.compile(url_pattern)))

    def on_response(self, response: Response) -> None:
        if response.status < 400:
            return
        for status, pattern in self.expected:
            if response.status == status and pattern.search(response.url):
                return
        request = response.request
        self.http_errors.append(f"{response.status} {request.method} {response.url}")

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type != "error":
            return
        text = message.text
        # Chromium logs every error response a second time on the console; an expected one is
        # already accepted above, an unexpected one already recorded.
        if text.startswith("Failed to load resource: the server responded with a status of"):
            return
        self.console_errors.append(f"{text} ({message.location.get('url', '')})")

    def on_page_error(self, error: Exception) -> None:
        self.console_errors.append(f"uncaught: {error}")

    def summary(self) -> str:
        lines = [f"console error: {text}" for text in self.console_errors]
        lines += [f"HTTP error: {text}" for text in self.http_errors]
        return "\n".join(lines)


@pytest.fixture(scope="package")
def playwright_driver() -> Iterator[Playwright]:
    """Playwright's driver, for the tests in this package only.

    Playwright's sync API keeps its asyncio loop marked as running in this thread between calls,
    so Django's ORM (in the test, not in the live server's own thread) would refuse to run here
    ("You cannot call this from an async context"). The browser tests do nothing async, so
    DJANGO_ALLOW_ASYNC_UNSAFE is set while the driver runs, and both end with this package: the
    rest of the suite keeps Django's check.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as driver:
            yield driver


@pytest.fixture(scope="package")
def chromium(playwright_driver: Playwright) -> Iterator[Browser]:
    """One Chromium for the browser tests; each test gets a fresh context (cookies, storage)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: run scripts/ensure-browser (make test does) "
            "or set TOOLROOM_CHROMIUM to a Chromium's path."
        )
    # launch() starts Chromium on a fresh temporary profile (--user-data-dir) of Playwright's
    # own, removed when the browser closes: nothing carries over from another run.
    browser = playwright_driver.chromium.launch(
        executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS
    )
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def page_problems() -> PageProblems:
    return PageProblems()


@pytest.fixture
def browser_context(chromium: Browser, live_server: Any) -> Iterator[BrowserContext]:
    """A fresh context per test (no cookies, no storage), addressed relative to the live server."""
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": 1366, "height": 900}
    )
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    context.set_default_navigation_timeout(ACTION_TIMEOUT_MS)
    try:
        yield context
    finally:
        context.close()


@pytest.fixture
def page(
    request: pytest.FixtureRequest, browser_context: BrowserContext, page_problems: PageProblems
) -> Iterator[Page]:
    """A browser tab that fails the test on any console error or 4xx/5xx response."""
    tab = browser_context.new_page()
    tab.on("console", page_problems.on_console)
    tab.on("pageerror", page_problems.on_page_error)
    tab.on("response", page_problems.on_response)
    yield tab
    call_report = getattr(request.node, "_browser_report_call", None)
    failed = call_report is not None and call_report.failed
    problems = page_problems.summary()
    if failed or problems:
        _save_screenshot(tab, request.node.nodeid)
    if problems and not failed:
        pytest.fail(f"The browser saw problems:\n{problems}", pytrace=False)


def _save_screenshot(tab: Page, nodeid: str) -> None:
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[-150:]
    try:
        tab.screenshot(path=str(SCREENSHOT_DIR / f"{name}.png"), full_page=True)
    except Exception as exc:  # the page may be gone (a crash); the test's own error says why
        print(f"No screenshot for {nodeid}: {exc}")


def sign_in(page: Page, username: str, password: str = PASSWORD) -> None:
    """Sign in through the admin's login form, the way a person does, and wait for the index."""
    page.goto("/admin/login/?next=/admin/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/admin/$"))


@pytest.fixture
def admin_page(page: Page, transactional_db: None) -> Page:
    """A page signed in as a superuser (the platform admin, `alice`)."""
    UserFactory(username="alice", is_staff=True, is_superuser=True)
    sign_in(page, "alice")
    return page
