"""The portal's forms: they parse what people type; the services decide what is allowed."""

from __future__ import annotations

from datetime import datetime, time
from typing import Any, cast

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.utils import timezone

from registry.servers.models import McpServer, Tool
from registry.teams.models import MembershipLevel, Team, TeamRole


class SignInForm(AuthenticationForm):
    """Django's own form: it calls `authenticate()`, so lockouts and auth signals apply."""

    username = forms.CharField(
        label="User name",
        widget=forms.TextInput(attrs={"autocomplete": "username", "autofocus": True}),
    )


def _end_of_day(day: Any) -> datetime | None:
    if day is None:
        return None
    return timezone.make_aware(datetime.combine(day, time(23, 59, 59)))


class _TargetField(forms.ChoiceField):
    """Shows some choices (what matches the search, what the team does not hold yet) and accepts
    every requestable one, so a covered target gets the service's reason, not "choose one"."""

    accepted: set[str] = set()

    def valid_value(self, value: Any) -> bool:
        return str(value) in self.accepted or super().valid_value(value)


def _matches(words: list[str], *texts: str) -> bool:
    haystack = " ".join(texts).lower()
    return all(word in haystack for word in words)


class AccessRequestForm(forms.Form):
    """What to ask for: `target` is `server:<id>` (the whole server) or `tool:<id>`. The choices
    leave out what the team already holds for every role (`held`), and with `find` only the
    servers and tools matching it (server name, slug, description, category; tool name, title,
    description): a tool match lists that tool alone, not every tool of its server."""

    target = _TargetField(
        label="Server or tool",
        error_messages={
            "invalid_choice": "Choose one of the approved servers or tools (the offer may have "
            "changed since this page was loaded)."
        },
    )
    role = forms.ChoiceField(label="For the role", required=False)
    justification = forms.CharField(
        label="Why the team needs it",
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=2000,
    )
    wished_expiry = forms.DateField(
        label="Needed until (optional)",
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Leave empty for no end date.",
    )

    def __init__(
        self,
        *args: Any,
        team: Team,
        targets: list[tuple[McpServer, list[Tool]]],
        held: set[str] | None = None,
        find: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.team = team
        self._servers = {server.pk: server for server, _ in targets}
        self._tools = {tool.pk: tool for _, tools in targets for tool in tools}
        held = held or set()
        words = find.lower().split()
        choices: list[Any] = [("", "Choose a server or tool")]
        self.shown = 0
        for server, tools in targets:
            category = server.category.name if server.category_id else ""  # type: ignore[union-attr]
            server_matches = _matches(words, server.name, server.slug, server.description, category)
            group = []
            if f"server:{server.pk}" not in held:
                if server_matches:
                    group.append((f"server:{server.pk}", f"{server.name}: the whole server"))
                group += [
                    (f"tool:{tool.pk}", f"{server.name}: {tool.name}")
                    for tool in tools
                    if f"tool:{tool.pk}" not in held
                    and (server_matches or _matches(words, tool.name, tool.title, tool.description))
                ]
            if group:
                choices.append((server.name, group))
                self.shown += len(group)
        field = cast(_TargetField, self.fields["target"])
        field.choices = choices
        field.accepted = {f"server:{pk}" for pk in self._servers} | {
            f"tool:{pk}" for pk in self._tools
        }
        cast(forms.ChoiceField, self.fields["role"]).choices = [("", "Every role of the team")] + [
            (str(role.pk), role.name) for role in team.roles.all()
        ]

    def clean_target(self) -> tuple[McpServer, Tool | None]:
        kind, _, raw_id = self.cleaned_data["target"].partition(":")
        pk = int(raw_id) if raw_id.isdigit() else 0
        if kind == "server" and pk in self._servers:
            return self._servers[pk], None
        if kind == "tool" and pk in self._tools:
            tool = self._tools[pk]
            return self._servers[tool.server_id], tool
        raise forms.ValidationError("Choose one of the approved servers or tools.")

    def clean_role(self) -> TeamRole | None:
        raw = self.cleaned_data.get("role") or ""
        if not raw:
            return None
        role = self.team.roles.filter(pk=int(raw)).first() if raw.isdigit() else None
        if role is None:
            raise forms.ValidationError("Choose one of the team's roles.")
        return role

    def wished_expires_at(self) -> datetime | None:
        return _end_of_day(self.cleaned_data.get("wished_expiry"))


def _role_label(obj: TeamRole) -> str:
    return f"{obj.name} ({', '.join(obj.permission_classes)} tools)"


class AgentTokenForm(forms.Form):
    name = forms.CharField(label="Agent name", max_length=100)
    role = forms.ModelChoiceField(queryset=TeamRole.objects.none(), label="Role", empty_label=None)
    expiry = forms.DateField(
        label="Expires (optional)",
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="The token stops working at the end of that day.",
    )
    required_servers = forms.CharField(
        label="Required servers (optional)",
        required=False,
        help_text="Server slugs separated by spaces or commas, for the catalogue's pre-flight.",
    )

    def __init__(self, *args: Any, team: Team, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        role = cast("forms.ModelChoiceField[TeamRole]", self.fields["role"])
        role.queryset = team.roles.all()
        role.label_from_instance = _role_label  # type: ignore[method-assign]

    def expires_at(self) -> datetime | None:
        return _end_of_day(self.cleaned_data.get("expiry"))


def parse_slugs(raw: str) -> list[str]:
    return [slug for slug in raw.replace(",", " ").split() if slug]


class DeclareServersForm(forms.Form):
    required_servers = forms.CharField(
        label="Required servers",
        required=False,
        help_text="Server slugs separated by spaces or commas; empty: none.",
    )


class MemberForm(forms.Form):
    """An owner adds a member or changes a level."""

    who = forms.CharField(
        label="User name or e-mail address",
        max_length=254,
        help_text="The person's Toolroom account (single sign-on accounts exist from their first "
        "sign-in).",
    )
    level = forms.ChoiceField(label="Level", choices=MembershipLevel.choices)


class MemberLevelForm(forms.Form):
    level = forms.ChoiceField(label="Level", choices=MembershipLevel.choices)
