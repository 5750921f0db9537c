"""Every portal page at 390 px (nothing scrolls sideways but a table inside its own box) and at
1280x800 (no table column cut off), and a rug pull seen by the team in the browser (issue 28).
The page fixture fails each test on a console error or a 4xx/5xx answer."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from registry.servers import services as server_services
from registry.servers.vetting import tool_sync
from registry.teams import services
from registry.teams.models import MembershipLevel
from tests.browser.test_portal import portal_sign_in
from tests.catalogue_helpers import READ, WRITE, approved_server
from tests.factories import TeamFactory, UserFactory, tool_definition
from tests.portal.test_portal_explain_items import item_of

FILES = {"read_file": READ, "write_file": WRITE}


@pytest.fixture
def busy_team(transactional_db):
    """alpha, owned by charlie (member dave), holding `files`; requests in every state, an agent
    token, a grant that ends soon: every portal page has rows."""
    charlie, dave = UserFactory(username="charlie"), UserFactory(username="dave")
    alpha = TeamFactory(slug="alpha", name="Alpha")
    services.team_member_set(actor="test", team=alpha, user=charlie, level=MembershipLevel.OWNER)
    services.team_member_set(actor="test", team=alpha, user=dave)
    files = approved_server("files", FILES, category="storage")
    clock = approved_server("clock", {"get_time": READ})
    weather = approved_server("weather", {"forecast": READ})
    services.grant_create(actor="test", team=alpha, server=files)
    item_of(files, uri="file:///notes/{id}", template=True)
    item_of(files, prompt="review", approve=False)
    services.grant_create(
        actor="test", team=alpha, server=weather, expires_at=timezone.now() + timedelta(days=3)
    )
    pending = services.access_request_create(
        actor=dave,
        team=alpha,
        server=clock,
        justification="We schedule the nightly reports by the clock " * 3,
        wished_expires_at=timezone.now() + timedelta(days=30),
    )
    assert pending.pk
    role = alpha.roles.first()
    services.agent_token_create(actor=charlie, team=alpha, role=role, name="nightly-reports")
    return {"alpha": alpha, "files": files}


PAGES = [
    "/portal/",
    "/portal/browse/?team=alpha",
    "/portal/teams/alpha/",
    "/portal/teams/alpha/requests/",
    "/portal/teams/alpha/owners/",
    "/portal/teams/alpha/explain/?tool=files__read_file",
    "/portal/teams/alpha/explain/?resource=toolroom://files/file%253A%252F%252F%252Fnotes%252F7",
    "/portal/teams/alpha/explain/?prompt=files__review",
    "/portal/teams/alpha/connect/",
    "/portal/apps/",
    "/portal/calls/",
]

OVERFLOW = """() => ({
  page: document.documentElement.scrollWidth,
  cut: [...document.querySelectorAll('.table-wrap')]
    .filter((box) => box.scrollWidth > box.clientWidth)
    .map((box) => (box.querySelector('caption, th') || box).textContent.trim().slice(0, 40)),
})"""


def test_every_portal_page_fits_390_px_and_1280_px(page: Page, busy_team):
    portal_sign_in(page, "charlie")
    for width, height in ((390, 844), (1280, 800)):
        page.set_viewport_size({"width": width, "height": height})
        for path in PAGES:
            assert page.goto(path).status == 200, path
            seen = page.evaluate(OVERFLOW)
            assert seen["page"] <= width, f"{path} is {seen['page']} px wide at {width} px"
            if width == 1280:
                assert seen["cut"] == [], f"{path} cuts off columns at 1280 px: {seen['cut']}"


def test_a_rug_pull_shows_in_the_teams_portal_as_waiting_for_review(page: Page, busy_team):
    files = busy_team["files"]
    definitions = [
        tool_definition(
            name,
            annotations=hints,
            **({"description": "Now worse."} if name == "read_file" else {}),
        )
        for name, hints in FILES.items()
    ]
    tool_sync.server_tools_sync(server=files, tools=definitions)
    portal_sign_in(page, "dave")

    notice = page.locator("section.notice")
    expect(notice).to_contain_text("files/read_file: changed upstream, waiting for review")
    page.get_by_role("link", name="Browse").first.click()
    expect(page.locator("#server-files").locator("xpath=..")).to_contain_text(
        "read_file (read, changed upstream, waiting for review)"
    )

    server_services.server_suspend(actor="test", server=files, reason="incident 42")
    page.goto("/portal/teams/alpha/")
    expect(notice).to_contain_text(
        "Files: suspended (incident 42). None of its tools can be called."
    )


def test_an_owner_manages_members_copies_a_new_token_and_a_reload_does_not_post_again(
    page: Page, busy_team, browser_context
):
    UserFactory(username="frank", email="frank@example.com")
    browser_context.grant_permissions(["clipboard-read", "clipboard-write"])
    portal_sign_in(page, "charlie")
    page.goto("/portal/teams/alpha/owners/")

    page.get_by_label("User name or e-mail address").fill("frank@example.com")
    page.get_by_role("button", name="Add to Alpha").click()
    expect(page.locator(".messages")).to_contain_text("frank is member of Alpha.")
    page.get_by_label("Level of frank").select_option("owner")
    page.get_by_role("button", name="Change the level of frank").click()
    expect(page.locator(".messages")).to_contain_text("frank is owner.")
    page.get_by_role("button", name="Remove frank").click()
    expect(page.locator(".messages")).to_contain_text("frank left Alpha.")
    expect(page.get_by_label("Level of frank")).to_have_count(0)

    page.get_by_label("Agent name").fill("release-bot")
    page.get_by_role("button", name="Create the token").click()
    token = page.locator("#new-token")
    plain = token.text_content() or ""
    assert plain.startswith("trm_")
    expect(page.locator("section.created")).to_contain_text("it is shown this once")
    page.get_by_role("button", name="Copy the token").click()
    expect(page.locator("section.created .copied")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == plain

    reloaded = page.reload()  # a GET: nothing is posted again, no 400
    assert reloaded.status == 200
    expect(token).to_have_count(0)
    expect(page.locator("tr", has_text="release-bot")).to_have_count(1)

    page.goto("/portal/teams/alpha/connect/")
    first = page.locator("section.snippet").first
    first.get_by_role("button", name="Copy").click()
    expect(first.locator(".copied")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == first.locator("code").text_content()


def test_the_why_not_page_explains_a_resource_and_a_prompt_by_keyboard(page: Page, busy_team):
    portal_sign_in(page, "dave")
    page.goto("/portal/teams/alpha/explain/")
    note = "toolroom://files/file%3A%2F%2F%2Fnotes%2F7"

    page.get_by_label("Resource, by the gateway's URI").fill(note)
    page.get_by_label("Resource, by the gateway's URI").press("Enter")
    expect(page.locator("p.expanded")).to_contain_text("is read through the resource template")
    verdicts = page.locator("section.explanation h2")
    expect(verdicts.filter(has_text=": callable")).not_to_have_count(0)

    page.get_by_label("Prompt, by its name").fill("files__review")
    page.get_by_role("button", name="Explain prompt").click()
    expect(page.locator("p.expanded")).to_have_count(0)
    expect(verdicts.filter(has_text=": callable")).to_have_count(0)
    expect(verdicts.filter(has_text=": not available")).not_to_have_count(0)
    expect(page.locator("section.explanation").first).to_contain_text("awaiting approval")
