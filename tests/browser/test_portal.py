"""The team portal in a real browser (Debian's Chromium through Playwright, on the live server):
single sign-on through a real OpenID Connect provider, browsing, asking for access, an admin's
decision the member then sees, an owner's agent token created (shown once) and revoked, another
team's page refused, keyboard and 390 px use."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from registry.teams import services
from registry.teams.models import AccessRequest, MembershipLevel
from tests.browser.conftest import PASSWORD, PageProblems
from tests.catalogue_helpers import READ, WRITE, approved_server
from tests.factories import GrantFactory, TeamFactory, UserFactory
from tests.oidc_fixtures import OidcProvider, start_oidc_provider, stop


@pytest.fixture(scope="module")
def browser_oidc_provider(live_server) -> Iterator[OidcProvider]:
    """The provider, sending the browser back to the live server's callback."""
    process, provider = start_oidc_provider([f"{live_server.url}/portal/oidc/callback/"])
    yield provider
    stop(process)


@pytest.fixture
def sso(settings, browser_oidc_provider, browser_context: BrowserContext):
    for name, value in browser_oidc_provider.django_settings().items():
        setattr(settings, name, value)
    settings.AUTHENTICATION_BACKENDS = [
        "django.contrib.auth.backends.ModelBackend",
        "registry.portal.oidc.PortalOidcBackend",
        "guardian.backends.ObjectPermissionBackend",
    ]
    # The provider's own development sign-in page imports a web font from Google; this machine
    # has no Internet, and the font is none of Toolroom's business: answer it with an empty sheet.
    browser_context.route(
        re.compile(r"^https://fonts\.googleapis\.com/"),
        lambda route: route.fulfill(status=200, content_type="text/css", body=""),
    )
    return browser_oidc_provider


@pytest.fixture
def world(transactional_db):
    """alpha (owner charlie, member dave) has the `files` server; beta (erin) has `secret`;
    `clock` is approved and nobody's yet."""
    charlie, dave = UserFactory(username="charlie"), UserFactory(username="dave")
    erin = UserFactory(username="erin")
    alpha = TeamFactory(slug="alpha", name="Alpha")
    beta = TeamFactory(slug="beta", name="Beta")
    services.team_member_set(actor="test", team=alpha, user=charlie, level=MembershipLevel.OWNER)
    services.team_member_set(actor="test", team=alpha, user=dave)
    services.team_member_set(actor="test", team=beta, user=erin)
    files = approved_server("files", {"read_file": READ, "write_file": WRITE}, category="storage")
    secret = approved_server("secret", {"recipe": READ})
    clock = approved_server("clock", {"get_time": READ})
    GrantFactory(team=alpha, server=files)
    GrantFactory(team=beta, server=secret)
    return {"alpha": alpha, "beta": beta, "clock": clock}


def portal_sign_in(page: Page, username: str) -> None:
    page.goto("/portal/sign-in/")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(re.compile(r"/portal/$"))


def test_sso_sign_in_browse_ask_and_see_the_admins_decision(page: Page, sso, world):
    page.goto("/portal/")
    page.get_by_role("link", name="Sign in with single sign-on").click()
    # The provider's own pages: its login form, then its consent form.
    page.locator("input[name=login]").fill("carol")
    page.locator("input[name=password]").fill("anything")
    page.get_by_role("button", name="Sign-in").click()
    page.get_by_role("button", name="Continue").click()

    page.wait_for_url(re.compile(r"/portal/$"))
    expect(page.get_by_role("heading", name="My teams")).to_be_visible()
    expect(page.locator("#team-alpha")).to_contain_text("Alpha")  # from the groups claim
    expect(page.locator("main")).to_contain_text("files__read_file")
    expect(page.get_by_role("link", name="Admin")).to_have_count(0)

    page.get_by_role("link", name="Browse").click()
    page.get_by_label("Search servers and tools").fill("get_time")
    page.get_by_role("button", name="Search").click()
    clock = page.locator("article", has=page.locator("#server-clock"))
    expect(clock).to_contain_text("Trust tier: Builtin")
    expect(clock).to_contain_text("Vetting: approved on")
    expect(page.locator("#server-files")).to_have_count(0)
    clock.get_by_role("link", name="Ask for Clock", exact=True).click()

    expect(page.get_by_label("Server or tool")).to_have_value(f"server:{world['clock'].pk}")
    page.get_by_label("Why the team needs it").fill("Timestamps for the release notes")
    page.get_by_role("button", name="Send the request").click()
    expect(page.locator(".messages")).to_contain_text("on its way to the admins")
    expect(page.locator("tbody tr").first).to_contain_text("Pending")

    request = AccessRequest.objects.get(server=world["clock"])
    assert request.requested_by.username == "carol"
    services.access_request_deny(
        actor=UserFactory(username="alice", is_staff=True, is_superuser=True),
        request=request,
        reason="The clock server is for operations only",
    )
    page.reload()
    row = page.locator("tbody tr").first
    expect(row).to_contain_text("Denied")
    expect(row).to_contain_text("by alice: The clock server is for operations only")


def test_an_owner_creates_a_token_shown_once_and_revokes_it(page: Page, world):
    portal_sign_in(page, "charlie")
    page.get_by_role("link", name="Alpha").first.click()
    page.get_by_role("link", name="Members and agents").click()
    expect(page.locator("main")).to_contain_text("dave")

    page.get_by_label("Agent name").fill("release-bot")
    page.get_by_label("Role", exact=True).select_option(label="review (read tools)")
    page.get_by_label("Required servers (optional)").fill("files")
    page.get_by_role("button", name="Create the token").click()
    plain = page.locator("#new-token").text_content() or ""
    assert plain.startswith("trm_")

    catalogue = page.request.get("/api/v1/catalogue", headers={"Authorization": f"Bearer {plain}"})
    assert catalogue.status == 200
    assert [t["name"] for t in catalogue.json()["tools"]] == ["files__read_file"]

    page.goto("/portal/teams/alpha/owners/")  # the token is gone for good
    expect(page.locator("#new-token")).to_have_count(0)
    assert plain not in page.content()
    row = page.locator("tr", has_text="release-bot")
    expect(row).not_to_contain_text("never")  # last used: the catalogue fetch above
    row.get_by_role("button", name="Revoke release-bot").click()
    expect(page.locator(".messages")).to_contain_text("release-bot is revoked")
    expect(page.locator("tr", has_text="release-bot")).to_contain_text("revoked")
    again = page.request.get("/api/v1/catalogue", headers={"Authorization": f"Bearer {plain}"})
    assert again.status == 401


def test_a_member_is_refused_another_teams_pages(page: Page, page_problems: PageProblems, world):
    portal_sign_in(page, "dave")
    page_problems.expect_status(404, r"/portal/teams/beta/")
    page_problems.expect_status(403, r"/portal/teams/alpha/owners/$")
    for path in ("/portal/teams/beta/", "/portal/teams/beta/requests/"):
        assert page.goto(path).status == 404
        expect(page.locator("main")).to_contain_text("None of your teams has this name")
        expect(page.get_by_role("link", name="Back to your teams")).to_be_visible()
    assert page.goto("/portal/teams/alpha/owners/").status == 403
    expect(page.locator("main")).to_contain_text("Only the team's owners")
    assert page.goto("/portal/teams/alpha/").status == 200
    expect(page.get_by_role("link", name="Members and agents")).to_have_count(0)


def test_the_forms_work_by_keyboard_at_390_px(page: Page, world):
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/portal/sign-in/")
    expect(page.get_by_label("User name")).to_be_focused()  # autofocus: type at once
    page.keyboard.type("dave")
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/portal/$"))
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()

    for path in ("/portal/", "/portal/browse/", "/portal/teams/alpha/connect/"):
        page.goto(path)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width} px wide at a 390 px viewport"

    page.goto("/portal/teams/alpha/requests/")
    fields = "main input:not([type=hidden]), main select, main textarea"
    unlabelled = page.evaluate(
        "(selector) => [...document.querySelectorAll(selector)]"
        ".filter(el => el.labels.length === 0).map(el => el.name)",
        fields,
    )
    assert unlabelled == []
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide at a 390 px viewport"
    page.get_by_label("Server or tool").focus()
    page.keyboard.press("Tab")
    expect(page.get_by_label("For the role")).to_be_focused()
    page.keyboard.press("Tab")
    page.keyboard.type("Need it by keyboard")
    page.get_by_label("Server or tool").select_option(f"server:{world['clock'].pk}")
    page.get_by_role("button", name="Send the request").focus()
    page.keyboard.press("Enter")
    expect(page.locator(".messages")).to_contain_text("on its way to the admins")
    assert AccessRequest.objects.filter(justification="Need it by keyboard").exists()


CONTRAST_SCRIPT = """() => {
  const rgb = (text) => (text.match(/[\\d.]+/g) || []).map(Number);
  const luminance = ([r, g, b]) => {
    const [R, G, B] = [r, g, b].map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * R + 0.7152 * G + 0.0722 * B;
  };
  const background = (el) => {
    for (; el; el = el.parentElement) {
      const [r, g, b, a] = rgb(getComputedStyle(el).backgroundColor);
      if (a === undefined || a > 0) return [r, g, b];
    }
    return [255, 255, 255];
  };
  const failures = [];
  for (const el of document.querySelectorAll('body *')) {
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!own || !el.getClientRects().length) continue;
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || el.closest('.skip, .visually-hidden')) continue;
    const [l1, l2] = [luminance(rgb(style.color)), luminance(background(el))];
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    if (ratio < 4.5) failures.push(`${el.tagName}.${el.className}: ${ratio.toFixed(2)}`);
  }
  return failures;
}"""


def test_every_text_has_a_contrast_of_at_least_4_5_to_1(page: Page, world):
    page.goto("/portal/sign-in/")
    page.get_by_label("User name").fill("dave")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Sign in", exact=True).click()  # an error message shows
    assert page.evaluate(CONTRAST_SCRIPT) == []
    portal_sign_in(page, "dave")
    services.access_request_create(
        actor=UserFactory(username="dave"),
        team=world["alpha"],
        server=world["clock"],
        justification="for the contrast check",
    )
    for path in ("/portal/", "/portal/browse/", "/portal/teams/alpha/requests/"):
        page.goto(path)
        assert page.evaluate(CONTRAST_SCRIPT) == [], path
    # The check can fail: a light grey paragraph on white (1.6:1) is reported.
    page.evaluate(
        "() => document.querySelector('main').insertAdjacentHTML("
        "'beforeend', '<p class=\"faint\" style=\"color:#cccccc\">faint</p>')"
    )
    assert page.evaluate(CONTRAST_SCRIPT) == ["P.faint: 1.61"]


def test_a_member_asks_why_and_why_not(page: Page, world):
    portal_sign_in(page, "dave")
    page.get_by_role("link", name="Alpha").first.click()
    page.get_by_role("link", name="Why (not)?").click()

    page.get_by_label("Tool, by its catalogue name").fill("files__write_file")
    page.get_by_role("button", name="Explain tool").click()
    expect(page.get_by_role("heading", name="Role operations: callable")).to_be_visible()
    review = page.locator(
        "section", has=page.get_by_role("heading", name=re.compile("Role review"))
    )
    expect(review).to_contain_text("not available")
    expect(review.locator("tr", has_text="The role may use this kind of tool")).to_contain_text(
        "fails"
    )

    page.get_by_label("Tool, by its catalogue name").fill("clock__get_time")
    page.get_by_role("button", name="Explain tool").click()
    expect(page.locator("tr", has_text="The team has been given access").first).to_contain_text(
        "fails"
    )
