"""The admin's access request page: Approve and Deny are its main buttons, and a read-only form
has no Save."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from registry.servers.models import ReviewStatus
from registry.teams.models import AccessRequestState
from registry.teams.services import access_request_create, access_request_deny, team_member_set
from tests.factories import McpServerFactory, TeamFactory, UserFactory


def _a_request(justification: str = "Nightly reports."):
    member = UserFactory(username="mia")
    team = TeamFactory(slug="data", name="Data")
    team_member_set(actor="test", team=team, user=member)
    server = McpServerFactory(name="Scenario", review_status=ReviewStatus.APPROVED)
    return access_request_create(
        actor=member, team=team, server=server, justification=justification
    )


def test_a_pending_request_offers_approve_and_deny_and_no_save(admin_page: Page):
    page = admin_page
    request = _a_request()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"/admin/teams/accessrequest/{request.pk}/change/")

    decision = page.locator("#access-decision")
    expect(decision.get_by_role("link")).to_have_text(["Approve", "Deny"])
    expect(decision.get_by_role("link", name="Approve")).to_have_class("button default")
    expect(page.locator("input[type=submit]")).to_have_count(0)  # no Save of any kind
    expect(page.get_by_role("link", name="Approve", exact=True)).to_have_count(1)

    decision.get_by_role("link", name="Deny").click()
    page.get_by_label("Reason").fill("Use the shared reporting server.")
    page.get_by_role("button", name="Deny").click()
    expect(page.locator(".messagelist")).to_contain_text("Denied the request")
    request.refresh_from_db()
    assert request.state == AccessRequestState.DENIED


def test_a_decided_request_has_no_buttons_and_refuses_a_post(admin_page: Page):
    page = admin_page
    request = _a_request()
    access_request_deny(actor="test", request=request, reason="Not now.")
    page.goto(f"/admin/teams/accessrequest/{request.pk}/change/")

    expect(page.locator("#access-decision")).to_have_count(0)
    expect(page.locator("input[type=submit]")).to_have_count(0)
    change_url = f"/admin/teams/accessrequest/{request.pk}/change/"
    token = page.locator("input[name=csrfmiddlewaretoken]").first.get_attribute("value")
    response = page.request.post(
        change_url,
        form={"csrfmiddlewaretoken": token or ""},
        headers={"Referer": page.url},
    )
    assert response.status == 403
