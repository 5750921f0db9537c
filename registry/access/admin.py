"""The access rules' admin views on a team's page (contributed to the team admin, which imports
nothing of the access rules): "Why not?", which explains the team's access to one tool, resource
or prompt, by name, for each of its roles, and "Private-data ratchet", which shows the team's
marks and resets them (audited)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse

from registry.access.explain import tool_by_name, tool_names_to_pick
from registry.access.explain_items import (
    asked_about,
    explain_for_roles,
    item_by_name,
    item_names_to_pick,
)
from registry.access.private_data import RatchetUnavailable, private_data_marks, private_data_reset
from registry.access.rule_types import Kind
from registry.teams.admin import TeamAdmin


def why_not_view(team_admin: TeamAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """ "Why not?": the team's access to one tool, resource or prompt (`?tool=`, `?resource=`,
    `?prompt=`: its agents' name), for each of its roles."""
    team = team_admin.get_object(request, object_id)
    if team is None or not team_admin.has_view_permission(request, team):
        raise PermissionDenied
    kind, name = asked_about(request.GET)
    name = name[:2000]
    subject = None
    if name:
        subject = (
            tool_by_name(name=name) if kind == Kind.TOOL else item_by_name(kind=kind, name=name)
        )
    explanations = explain_for_roles(team=team, subject=subject, name=name)
    return TemplateResponse(
        request,
        "admin/access/team_explain.html",
        {
            **team_admin.admin_site.each_context(request),
            "opts": team_admin.opts,
            "title": f"Why not? Access of {team}",
            "team": team,
            "kind": kind,
            "name": name,
            "error": f"No {kind} is named '{name}'." if name and subject is None else "",
            "explanations": explanations,
            "tool_names": tool_names_to_pick(),
            "resource_names": item_names_to_pick(kind="resource"),
            "prompt_names": item_names_to_pick(kind="prompt"),
        },
    )


TeamAdmin.contribute_view(
    route="<path:object_id>/why-not/", name="teams_team_why_not", view=why_not_view
)


def ratchet_view(team_admin: TeamAdmin, request: HttpRequest, object_id: str) -> HttpResponse:
    """The team's private-data marks (GET) and their reset (POST, admins who may change the
    team; audited)."""
    team = team_admin.get_object(request, object_id)
    if team is None or not team_admin.has_view_permission(request, team):
        raise PermissionDenied
    if request.method == "POST":
        if not team_admin.has_change_permission(request, team):
            raise PermissionDenied
        try:
            reset = private_data_reset(
                actor=request.user, team=team, reason=request.POST.get("reason", "")
            )
        except RatchetUnavailable:
            messages.error(request, "The shared cache refuses: nothing was reset.")
        else:
            messages.success(
                request, f"Private-data ratchet reset: {len(reset.cleared)} mark(s) cleared."
            )
        return HttpResponseRedirect(request.path)
    try:
        marks, error = private_data_marks(team), ""
    except RatchetUnavailable:
        marks, error = {}, "The shared cache refuses: the marks cannot be read now."
    return TemplateResponse(
        request,
        "admin/access/team_ratchet.html",
        {
            **team_admin.admin_site.each_context(request),
            "opts": team_admin.opts,
            "title": f"Private-data ratchet of {team}",
            "team": team,
            "marks": sorted(marks.items()),
            "error": error,
            "can_reset": team_admin.has_change_permission(request, team),
        },
    )


TeamAdmin.contribute_view(
    route="<path:object_id>/private-data-ratchet/", name="teams_team_ratchet", view=ratchet_view
)
