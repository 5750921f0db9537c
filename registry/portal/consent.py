"""The authorization endpoint as a person meets it: sign in (the portal's own sign-in, password or
single sign-on, with its lockout), then the consent page; and the person's "Connected apps".

More: docs/authentication.md, "Module notes"."""

from __future__ import annotations

from collections import Counter
from typing import Any, cast
from urllib.parse import urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST
from oauth2_provider.exceptions import OAuthToolkitError
from oauth2_provider.views.base import BaseAuthorizationView
from oauthlib.oauth2.rfc6749.errors import CustomOAuth2Error

from registry.catalogue.selectors import catalogue_for_agent
from registry.core.errors import ApplicationError
from registry.gateway.selectors import person_recent_calls
from registry.oauth.models import Client, ClientAuthorization
from registry.oauth.selectors import (
    TeamChoice,
    authorization_remembered,
    authorization_standing_problem,
    person_authorizations,
    person_team_choices,
)
from registry.oauth.services import client_authorization_grant, client_authorization_revoke
from registry.oauth.tokens import gateway_resource_url, resource_is_gateway
from registry.teams.models import Team, TeamRole

# The authorization request's parameters, carried from the page to its answer.
CARRIED = (
    "client_id",
    "redirect_uri",
    "response_type",
    "state",
    "code_challenge",
    "code_challenge_method",
    "scope",
    "resource",
)


def _tool_counts(team: Team, role: TeamRole) -> dict[str, int]:
    counts = Counter(
        tool.permission_class
        for tool in catalogue_for_agent(team_id=team.pk, role_id=role.pk).tools
    )
    return {pc: counts.get(pc, 0) for pc in ("read", "write", "connect")}


def _choices_context(choices: list[TeamChoice]) -> list[dict[str, Any]]:
    return [
        {
            "team": choice.team,
            "roles": [
                {
                    "role": role,
                    "value": f"{choice.team.pk}:{role.pk}",
                    "tools": _tool_counts(choice.team, role),
                }
                for role in choice.roles
            ],
        }
        for choice in choices
    ]


class ConsentView(BaseAuthorizationView):
    """GET: validate the authorization request and show the consent page. POST: allow or deny."""

    def error_response(
        self, error: OAuthToolkitError, application: Any, **kwargs: Any
    ) -> HttpResponse:
        redirect, answer = super(BaseAuthorizationView, self).error_response(error, **kwargs)
        if redirect:
            response: HttpResponse = self.redirect(answer["url"], application)
            return response
        failure = answer["error"]
        return render(
            self.request,
            "portal/oauth_error.html",
            {
                "section": "",
                "error": failure.error,
                "description": failure.description or "The authorization request is not valid.",
            },
            status=failure.status_code,
        )

    def _invalid_target(self, credentials: dict[str, Any], resource: str) -> OAuthToolkitError:
        return OAuthToolkitError(
            error=CustomOAuth2Error(
                error="invalid_target",
                description="Toolroom issues tokens for its gateway only "
                f"({gateway_resource_url()}), not for {resource}.",
                state=credentials.get("state"),
            ),
            redirect_uri=credentials["redirect_uri"],
        )

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            scopes, credentials = self.validate_authorization_request(request)
        except OAuthToolkitError as error:
            return self.error_response(error, application=None)
        client = Client.objects.get(client_id=credentials["client_id"])
        resources = request.GET.getlist("resource")
        for resource in resources:
            if not resource_is_gateway(resource):
                return self.error_response(self._invalid_target(credentials, resource), client)
        carried = {
            "client_id": credentials["client_id"],
            "redirect_uri": credentials["redirect_uri"],
            "response_type": credentials["response_type"],
            "state": credentials.get("state") or "",
            "code_challenge": credentials.get("code_challenge") or "",
            "code_challenge_method": credentials.get("code_challenge_method") or "",
            "scope": " ".join(scopes),
            "resource": " ".join(resources),
        }
        remembered = authorization_remembered(person=request.user, client_id=client.pk)
        if len(remembered) == 1 and "consent" not in request.GET.get("prompt", "").split():
            authorization = remembered[0]
            authorization.person = cast(Any, request.user)
            if not authorization_standing_problem(authorization=authorization):
                return self._issue(client, carried, authorization)
        choices = person_team_choices(person=request.user)
        remembered_values = {f"{a.team_id}:{a.role_id}" for a in remembered}
        return render(
            request,
            "portal/consent.html",
            {
                "section": "",
                "client": client,
                "redirect_host": urlsplit(credentials["redirect_uri"]).netloc,
                "carried": carried,
                "choices": _choices_context(choices),
                "remembered": remembered_values,
            },
        )

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        carried = {name: request.POST.get(name, "") for name in CARRIED}
        client = Client.objects.filter(client_id=carried["client_id"]).first()
        if client is None or not client.redirect_uri_allowed(carried["redirect_uri"]):
            return render(
                request,
                "portal/oauth_error.html",
                {
                    "section": "",
                    "error": "invalid_request",
                    "description": "The consent form does not name a registered client and one of "
                    "its redirect addresses.",
                },
                status=400,
            )
        if "deny" in request.POST:
            try:
                self.create_authorization_response(
                    request=request,
                    scopes=carried["scope"],
                    credentials=self._credentials(carried),
                    allow=False,
                )
            except OAuthToolkitError as error:
                return self.error_response(error, client)
        team_id, _, role_id = request.POST.get("choice", "").partition(":")
        team = Team.objects.filter(pk=int(team_id)).first() if team_id.isdigit() else None
        role = (
            TeamRole.objects.filter(pk=int(role_id), team=team).first()
            if team is not None and role_id.isdigit()
            else None
        )
        if team is None or role is None:
            return self._refused(request, "Choose one of your teams and a role to act as.")
        try:
            with transaction.atomic():
                authorization = client_authorization_grant(
                    person=request.user, client=client, team=team, role=role
                )
                return self._issue(client, carried, authorization)
        except ApplicationError as exc:
            return self._refused(request, exc.message)
        except OAuthToolkitError as error:
            return self.error_response(error, client)

    def _refused(self, request: HttpRequest, message: str) -> HttpResponse:
        return render(
            request,
            "portal/oauth_error.html",
            {"section": "", "error": "access_denied", "description": message},
            status=400,
        )

    def _credentials(self, carried: dict[str, str]) -> dict[str, Any]:
        credentials: dict[str, Any] = {
            name: carried[name]
            for name in ("client_id", "redirect_uri", "response_type", "state")
            if carried.get(name)
        }
        for name in ("code_challenge", "code_challenge_method"):
            if carried.get(name):
                credentials[name] = carried[name]
        if carried.get("resource"):
            credentials["resource"] = carried["resource"].split()
        return credentials

    def _issue(
        self, client: Client, carried: dict[str, str], authorization: ClientAuthorization
    ) -> HttpResponse:
        """Issue the code for this authorization (raises OAuthToolkitError; the caller's
        transaction then writes nothing)."""
        credentials = self._credentials(carried)
        credentials["toolroom_authorization_id"] = authorization.pk
        uri, _headers, _body, _status = self.create_authorization_response(
            request=self.request, scopes=carried["scope"], credentials=credentials, allow=True
        )
        response: HttpResponse = self.redirect(uri, client)
        return response


@login_required
def connected_apps(request: HttpRequest) -> HttpResponse:
    """The person's authorized clients, each revocable."""
    return render(
        request,
        "portal/connected_apps.html",
        {"section": "apps", "authorizations": list(person_authorizations(person=request.user))},
    )


@login_required
@require_POST
def connected_app_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    authorization = person_authorizations(person=request.user).filter(pk=pk).first()
    if authorization is None:
        messages.error(request, "You have no such connected app.")
    else:
        try:
            client_authorization_revoke(
                actor=request.user, authorization=authorization, reason="revoked by the person"
            )
        except ApplicationError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(
                request,
                f"{authorization.client.display_name} can no longer act for you in "
                f"{authorization.team.name}.",
            )
    return HttpResponseRedirect(reverse("portal:apps"))


@login_required
def my_calls(request: HttpRequest) -> HttpResponse:
    """The person's own recent calls, made through the apps that act for them."""
    return render(
        request,
        "portal/my_calls.html",
        {"section": "calls", "calls": person_recent_calls(person=request.user, limit=100)},
    )
