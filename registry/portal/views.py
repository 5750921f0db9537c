"""The portal's pages. Thin: a form parses, a teams service decides, a selector reads.

Every team page resolves its team through `portal_team` (guardian's view permission), so a
person reaches only their own teams' pages: another team's slug is answered like an unknown one
(404). Owner pages also need the manage permission (403 for the team's other members).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from registry.access.explain import tool_for_agent_name, tool_names_to_pick
from registry.access.explain_items import (
    asked_about,
    explain_for_roles,
    item_for_agent_name,
    item_names_to_pick,
)
from registry.access.rule_types import Kind
from registry.catalogue.selectors import catalogue_for_agent
from registry.core.api_errors import api_not_found
from registry.core.errors import ApplicationError
from registry.core.secret_fields import decrypt_text, encrypt_text
from registry.portal import selectors
from registry.portal.connect import connect_snippets
from registry.portal.forms import (
    AccessRequestForm,
    AgentTokenForm,
    DeclareServersForm,
    MemberForm,
    MemberLevelForm,
    SignInForm,
    parse_slugs,
)
from registry.portal.services import (
    portal_access_request_create,
    portal_member_remove,
    portal_member_set,
)
from registry.teams import services as team_services
from registry.teams.models import AccessRequest, AgentToken, Membership, Team

# The session key under which a new agent token waits, encrypted, for the one page that shows it.
JUST_CREATED = "portal_just_created"

TeamView = Callable[..., HttpResponse]


class PersonRequest(HttpRequest):
    """A request behind `login_required`: its user is a signed-in person (django-stubs' way of
    saying so); `team_page` also records whether that person owns the team."""

    user: User
    portal_team_is_owner: bool


def _oidc_enabled() -> bool:
    return bool(getattr(settings, "OIDC_RP_CLIENT_ID", ""))


class SignInView(auth_views.LoginView):
    template_name = "portal/sign_in.html"
    authentication_form = SignInForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["oidc_enabled"] = _oidc_enabled()
        context["sso_label"] = settings.TOOLROOM_OIDC_LABEL
        context["sso_failed"] = self.request.GET.get("sso") == "failed"
        return context


class SignOutView(auth_views.LogoutView):
    next_page = "portal:sign-in"


NOT_YOURS = "None of your teams has this name, or it does not exist."


def refused(request: HttpRequest, status: int, message: str) -> HttpResponse:
    """The portal's own 403/404 page: members never land on the admin's look or links."""
    return render(
        request,
        "portal/refused.html",
        {"section": "", "status": status, "message": message},
        status=status,
    )


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: the portal's own page under /portal/ (members never see the admin's look or
    its links), the API's JSON error or Django's page elsewhere."""
    if request.path_info.startswith("/portal/"):
        return refused(
            request,
            404,
            "There is nothing at this address: it may have been removed, or the link is wrong.",
        )
    return api_not_found(request, exception)


def team_page(*, owners_only: bool = False) -> Callable[[TeamView], TeamView]:
    """Resolve `slug` to one of the person's teams (404 otherwise) and pass it on as `team`."""

    def decorate(view: TeamView) -> TeamView:
        @login_required
        @wraps(view)
        def wrapper(request: PersonRequest, slug: str, *args: Any, **kwargs: Any) -> HttpResponse:
            team = selectors.portal_team(user=request.user, slug=slug)
            if team is None:
                return refused(request, 404, NOT_YOURS)
            is_owner = selectors.portal_is_owner(user=request.user, team=team)
            if owners_only and not is_owner:
                return refused(request, 403, "Only the team's owners may see and do this.")
            request.portal_team_is_owner = is_owner
            return view(request, team, *args, **kwargs)

        return wrapper

    return decorate


def _context(request: HttpRequest, team: Team | None, section: str, **extra: Any) -> dict[str, Any]:
    return {
        "team": team,
        "section": section,
        "is_owner": getattr(request, "portal_team_is_owner", False),
        **extra,
    }


def _form_error(form: Any, exc: ApplicationError, *, default_field: str | None = None) -> None:
    field = exc.field if exc.field in form.fields else default_field
    form.add_error(field, exc.message)


def landing(request: HttpRequest) -> HttpResponse:
    """`/`: staff go to the admin, everyone else to the portal."""
    return redirect("admin:index" if request.user.is_staff else "portal:home")


@login_required
def home(request: PersonRequest) -> HttpResponse:
    """My teams: for each team and role, the tools usable now; grants that end soon."""
    overviews = [
        selectors.team_overview(user=request.user, team=team)
        for team in selectors.portal_teams(user=request.user)
    ]
    return render(request, "portal/home.html", _context(request, None, "home", overviews=overviews))


@team_page()
def team_detail(request: PersonRequest, team: Team) -> HttpResponse:
    overview = selectors.team_overview(user=request.user, team=team)
    return render(request, "portal/team.html", _context(request, team, "team", overview=overview))


@login_required
def browse(request: HttpRequest) -> HttpResponse:
    """Approved servers and tools, searchable, marked with what the chosen team already has."""
    teams = list(selectors.portal_teams(user=request.user))
    chosen = request.GET.get("team", "")
    team = next((t for t in teams if t.slug == chosen), teams[0] if teams else None)
    search = request.GET.get("q", "")[:200]
    rows = selectors.browse_servers(team=team, search=search)
    return render(
        request,
        "portal/browse.html",
        _context(request, team, "browse", rows=rows, search=search, my_teams=teams),
    )


@team_page()
def access_requests(request: PersonRequest, team: Team) -> HttpResponse:
    """Ask for access; the team's requests with their state and the decision's reason."""
    targets = selectors.requestable_targets(team=team)
    initial = {"target": request.GET.get("target", "")}
    find = request.GET.get("find", "").strip()[:200]
    form = AccessRequestForm(
        request.POST or None,
        team=team,
        targets=targets,
        held=selectors.held_targets(team=team),
        find=find,
        initial=initial,
    )
    if request.method == "POST" and form.is_valid():
        server, tool = form.cleaned_data["target"]
        try:
            portal_access_request_create(
                actor=request.user,
                team=team,
                server=server,
                tool=tool,
                role=form.cleaned_data["role"],
                justification=form.cleaned_data["justification"],
                wished_expires_at=form.wished_expires_at(),
            )
        except ApplicationError as exc:
            _form_error(form, exc, default_field="target")
        else:
            messages.success(request, "Your request is on its way to the admins.")
            return redirect("portal:requests", slug=team.slug)
    return render(
        request,
        "portal/requests.html",
        _context(
            request,
            team,
            "requests",
            form=form,
            find=find,
            requests=selectors.team_access_requests(team=team),
        ),
    )


@require_POST
@team_page()
def access_request_withdraw(request: HttpRequest, team: Team, pk: int) -> HttpResponse:
    access_request = AccessRequest.objects.filter(pk=pk, team=team).first()
    if access_request is None:
        return refused(request, 404, "Your team has no such request.")
    if access_request.requested_by_id != request.user.pk and not getattr(
        request, "portal_team_is_owner", False
    ):
        return refused(request, 403, "Only the person who asked or a team owner may withdraw it.")
    try:
        team_services.access_request_withdraw(actor=request.user, request=access_request)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "The request is withdrawn.")
    return redirect("portal:requests", slug=team.slug)


def _owners_page(
    request: HttpRequest,
    team: Team,
    *,
    form: AgentTokenForm | None = None,
    member_form: MemberForm | None = None,
    status: int = 200,
) -> HttpResponse:
    tokens = selectors.team_agent_tokens(team=team)
    preflights = selectors.agent_token_preflights(team=team, tokens=tokens)
    for token in tokens:
        token.preflight = preflights.get(token.pk)  # type: ignore[attr-defined]
    created = _created_token(request, team)
    response = render(
        request,
        "portal/owners.html",
        _context(
            request,
            team,
            "owners",
            members=selectors.team_members(team=team),
            roles=list(team.roles.all()),
            tokens=tokens,
            form=form or AgentTokenForm(team=team),
            member_form=member_form or MemberForm(initial={"level": "member"}),
            created=created,
        ),
        status=status,
    )
    # The token is shown once, on the page the creation redirected to: never cached, and gone
    # from the session as soon as it is read (a reload shows the list, never re-posts).
    response["Cache-Control"] = "no-store"
    return response


def _created_token(request: HttpRequest, team: Team) -> dict[str, str] | None:
    if request.method != "GET":  # only the page the creation redirected to shows it
        return None
    kept = request.session.pop(JUST_CREATED, None)
    if not isinstance(kept, dict) or kept.get("team") != team.slug:
        return None
    return {"name": str(kept["name"]), "plain": decrypt_text(str(kept["secret"]))}


@team_page(owners_only=True)
def owners(request: HttpRequest, team: Team) -> HttpResponse:
    """Team owners: members and roles, agent tokens (create, revoke, last used), declarations."""
    return _owners_page(request, team)


@require_POST
@team_page(owners_only=True)
def agent_token_create(request: PersonRequest, team: Team) -> HttpResponse:
    form = AgentTokenForm(request.POST, team=team)
    if not form.is_valid():
        return _owners_page(request, team, form=form, status=400)
    required = parse_slugs(form.cleaned_data["required_servers"])
    try:
        created = team_services.agent_token_create(
            actor=request.user,
            team=team,
            role=form.cleaned_data["role"],
            name=form.cleaned_data["name"],
            expires_at=form.expires_at(),
            declared_servers={"required": required} if required else None,
        )
    except ApplicationError as exc:
        _form_error(form, exc, default_field="name")
        return _owners_page(request, team, form=form, status=400)
    # Post, redirect, get: the secret waits (encrypted with TOOLROOM_SECRETS_KEY) for the page
    # the browser is sent to, which shows it once.
    request.session[JUST_CREATED] = {
        "team": team.slug,
        "name": created.token.name,
        "secret": encrypt_text(created.plain),
    }
    return redirect(f"{reverse('portal:owners', args=[team.slug])}#created-title")


@require_POST
@team_page(owners_only=True)
def member_set(request: PersonRequest, team: Team) -> HttpResponse:
    """Add a member or change a level (audited as team.member_set)."""
    form = MemberForm(request.POST)
    if not form.is_valid():
        return _owners_page(request, team, member_form=form, status=400)
    try:
        membership = portal_member_set(
            actor=request.user,
            team=team,
            who=form.cleaned_data["who"],
            level=form.cleaned_data["level"],
        )
    except ApplicationError as exc:
        _form_error(form, exc, default_field="who")
        return _owners_page(request, team, member_form=form, status=400)
    messages.success(
        request,
        f"{membership.user.get_username()} is {membership.get_level_display().lower()} of "
        f"{team.name}.",
    )
    return redirect("portal:owners", slug=team.slug)


@require_POST
@team_page(owners_only=True)
def member_level(request: PersonRequest, team: Team, pk: int) -> HttpResponse:
    membership = Membership.objects.filter(pk=pk, team=team).select_related("user").first()
    if membership is None:
        return refused(request, 404, "Your team has no such member.")
    form = MemberLevelForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose owner or member.")
        return redirect("portal:owners", slug=team.slug)
    try:
        updated = portal_member_set(
            actor=request.user,
            team=team,
            who=membership.user.get_username(),
            level=form.cleaned_data["level"],
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request, f"{updated.user.get_username()} is {updated.get_level_display().lower()}."
        )
    return redirect("portal:owners", slug=team.slug)


@require_POST
@team_page(owners_only=True)
def member_remove(request: PersonRequest, team: Team, pk: int) -> HttpResponse:
    membership = Membership.objects.filter(pk=pk, team=team).select_related("user").first()
    if membership is None:
        return refused(request, 404, "Your team has no such member.")
    try:
        portal_member_remove(
            actor=request.user,
            team=team,
            membership=membership,
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{membership.user.get_username()} left {team.name}.")
    if membership.user_id == request.user.pk:
        return redirect("portal:home")  # they removed themselves: no owner page any more
    return redirect("portal:owners", slug=team.slug)


@require_POST
@team_page(owners_only=True)
def agent_token_revoke(request: HttpRequest, team: Team, pk: int) -> HttpResponse:
    token = AgentToken.objects.filter(pk=pk, team=team).first()
    if token is None:
        return refused(request, 404, "Your team has no such agent token.")
    try:
        team_services.agent_token_revoke(actor=request.user, token=token)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"The agent token {token.name} is revoked.")
    return redirect("portal:owners", slug=team.slug)


@require_POST
@team_page(owners_only=True)
def agent_token_declare(request: HttpRequest, team: Team, pk: int) -> HttpResponse:
    token = AgentToken.objects.filter(pk=pk, team=team).first()
    if token is None:
        return refused(request, 404, "Your team has no such agent token.")
    form = DeclareServersForm(request.POST)
    form.is_valid()
    required = parse_slugs(form.cleaned_data.get("required_servers", ""))
    declared = {**(token.declared_servers or {}), "required": required}
    try:
        team_services.agent_token_declare_servers(
            actor=request.user, token=token, declared_servers=declared
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{token.name} now requires: {', '.join(required) or 'nothing'}.")
    return redirect("portal:owners", slug=team.slug)


@team_page()
def connect(request: HttpRequest, team: Team) -> HttpResponse:
    """Copy-paste set-up for MCP clients and function-calling examples."""
    role = team.roles.first()
    snippets = []
    public_url = (settings.TOOLROOM_PUBLIC_URL or request.build_absolute_uri("/")).rstrip("/")
    if role is not None:
        catalogue = catalogue_for_agent(team_id=team.pk, role_id=role.pk)
        snippets = connect_snippets(catalogue=catalogue, public_url=public_url)
    return render(
        request,
        "portal/connect.html",
        _context(request, team, "connect", snippets=snippets, public_url=public_url),
    )


@team_page()
def explain(request: HttpRequest, team: Team) -> HttpResponse:
    """Why (not)? The team's access to one tool (`?tool=`, its catalogue name), resource
    (`?resource=`, its toolroom:// URI, or a concrete URI expanded from a template) or prompt
    (`?prompt=`), for each of the team's roles, rule by rule: the same `access_explain` and
    `item_explain` the API and the admin answer with. Only what the team may ask about is
    explained (an approved server's, or one its grants cover); anything else reads like a name
    that does not exist."""
    kind, name = asked_about(request.GET)
    name = name[: 2000 if kind == Kind.RESOURCE else 200]
    subject = None
    if name:
        subject = (
            tool_for_agent_name(team=team, name=name)
            if kind == Kind.TOOL
            else item_for_agent_name(team=team, kind=kind, name=name)
        )
    explanations = explain_for_roles(team=team, subject=subject, name=name)
    error = f"No {kind} you may ask about is named '{name}'." if name and subject is None else ""
    return render(
        request,
        "portal/explain.html",
        _context(
            request,
            team,
            "explain",
            kind=kind,
            name=name,
            error=error,
            explanations=explanations,
            tool_names=tool_names_to_pick(team=team),
            resource_names=item_names_to_pick(kind=Kind.RESOURCE, team=team),
            prompt_names=item_names_to_pick(kind=Kind.PROMPT, team=team),
        ),
    )
