"""Forms of the vetting workplace: a server form that never shows secrets back, decision forms."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from registry.core.secret_fields import mask_secret
from registry.servers.importing.launchers import LauncherError, PackagePin, launcher_adopt
from registry.servers.importing.package_versions import PackageLookupError
from registry.servers.models import McpServer, PermissionClass, Transport
from registry.servers.services import SECRET_FIELDS, SERVER_EDITABLE_FIELDS


def secrets_as_text(values: dict[str, str], *, separator: str = "=") -> str:
    """One `NAME=masked` line per secret: the names show, the values never do."""
    return "\n".join(
        f"{name}{separator}{mask_secret(value) if value else ''}"
        for name, value in sorted(values.items())
    )


def secrets_from_text(text: str, *, current: dict[str, str], what: str) -> dict[str, str]:
    """Parse `NAME=value` lines; a line whose value is still the mask keeps the stored value."""
    result: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=" if what == "env" else ":")
        if not sep and what == "headers":
            name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name:
            example = "NAME=value" if what == "env" else "Header-Name: value"
            raise ValidationError(f"Line {number} is not {example}.")
        if name in result:
            raise ValidationError(f"{name} is given twice (line {number}).")
        value = value.strip() if what == "headers" else value
        old = current.get(name)
        if old is not None and old and value == mask_secret(old):
            value = old
        result[name] = value
    return result


class ArgvField(forms.CharField):
    """An argv list edited one argument per line, so no shell ever splits it."""

    widget = forms.Textarea(attrs={"rows": 4, "cols": 80, "spellcheck": "false"})

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return "\n".join(value)
        if isinstance(value, str) and value.startswith("["):
            try:
                return "\n".join(json.loads(value))
            except (ValueError, TypeError):
                return value
        return value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]
        text = super().to_python(value) or ""
        return [line.rstrip("\r") for line in text.split("\n") if line.strip()]


class McpServerAdminForm(forms.ModelForm[McpServer]):
    command = ArgvField(
        required=False,
        help_text="stdio only: the program on the first line, then one argument per line. "
        "Nothing is run through a shell.",
    )
    env_text = forms.CharField(
        label="Environment",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80, "spellcheck": "false"}),
        help_text="One NAME=value per line. Stored values are shown masked; leave a masked "
        "value as it is to keep it, type a new value to replace it, delete the line to remove it.",
    )
    headers_text = forms.CharField(
        label="Headers",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80, "spellcheck": "false"}),
        help_text="HTTP only: one 'Header-Name: value' per line, masked like the environment.",
    )
    homepage_url = forms.URLField(required=False, assume_scheme="https")
    repository_url = forms.URLField(required=False, assume_scheme="https")
    egress_allowlist = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Proxied network only: one host:port per line, e.g. api.github.com:443.",
    )

    class Meta:
        model = McpServer
        # env and headers are edited through the masked text fields above.
        fields = sorted(SERVER_EDITABLE_FIELDS - SECRET_FIELDS)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["env_text"].initial = secrets_as_text(self.instance.env or {})
        self.fields["headers_text"].initial = secrets_as_text(
            self.instance.headers or {}, separator=": "
        )
        self.initial["egress_allowlist"] = "\n".join(self.instance.egress_allowlist or [])

    def clean_env_text(self) -> dict[str, str]:
        return secrets_from_text(
            self.cleaned_data.get("env_text") or "", current=self.instance.env or {}, what="env"
        )

    def clean_headers_text(self) -> dict[str, str]:
        return secrets_from_text(
            self.cleaned_data.get("headers_text") or "",
            current=self.instance.headers or {},
            what="headers",
        )

    def clean_egress_allowlist(self) -> list[str]:
        text = self.cleaned_data.get("egress_allowlist") or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        self._adopt_launcher(cleaned)
        return cleaned

    def _adopt_launcher(self, cleaned: dict[str, Any]) -> None:
        """`npx -y pkg`, `uvx pkg`, `docker run ... IMAGE` typed as the command become a pinned
        package or image reference, as an import would store them."""
        self.launcher_pin: PackagePin | None = None
        self.launcher_notes: list[str] = []
        self.adopted_fields: set[str] = set()
        argv = cleaned.get("command")
        if (
            cleaned.get("transport") != Transport.STDIO
            or not argv
            or cleaned.get("package_registry")
            or cleaned.get("image")
        ):
            return
        env = cleaned.get("env_text")
        try:
            adoption = launcher_adopt(argv=argv, env=env if isinstance(env, dict) else None)
        except (LauncherError, PackageLookupError) as exc:
            self.add_error("command", str(exc))
            return
        if adoption is None:
            return
        for name, value in adoption.fields.items():
            if name == "env":
                cleaned["env_text"] = {key: val or "" for key, val in value.items()}
                self.adopted_fields.add("env_text")
            else:
                cleaned[name] = value
                self.adopted_fields.add(name)
        self.launcher_pin = adoption.pin
        self.launcher_notes = adoption.warnings

    def _post_clean(self) -> None:
        # The model validates env and headers with everything else.
        self.instance.env = self.cleaned_data.get("env_text", self.instance.env)
        self.instance.headers = self.cleaned_data.get("headers_text", self.instance.headers)
        super()._post_clean()  # type: ignore[misc]  # private in the stubs, public in Django

    def server_fields(self, *, changed_only: bool) -> dict[str, Any]:
        """The form's values as the services take them (field -> value), all or only edits."""
        names = self.changed_data if changed_only else list(self.fields)
        names = [*names, *sorted(set(getattr(self, "adopted_fields", ())) - set(names))]
        values = {
            name: self.cleaned_data[name]
            for name in names
            if name in SERVER_EDITABLE_FIELDS and name in self.cleaned_data
        }
        for field_name, secret_name in (("env_text", "env"), ("headers_text", "headers")):
            if field_name in names and field_name in self.cleaned_data:
                values[secret_name] = self.cleaned_data[field_name]
        return values


class ReviewDecisionForm(forms.Form):
    """What a review decision asks for: nothing to submit, a note to approve (required where the
    tier asks for one), a reason to reject or suspend, an optional reason to retire."""

    reason = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 80}))

    def __init__(self, *args: Any, action: str, note_required: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        reason = self.fields["reason"]
        if action == "submit":
            del self.fields["reason"]
        elif action == "approve":
            reason.label = "Note"
            reason.required = note_required
            reason.help_text = (
                "Required for this tier: say what was reviewed."
                if note_required
                else "Optional: what was reviewed."
            )
        else:
            reason.required = action in ("reject", "suspend")
            reason.help_text = "Kept in the audit trail." + (
                "" if reason.required else " Optional."
            )
        if "reason" in self.fields:
            reason.error_messages["required"] = (
                "Say what was reviewed." if action == "approve" else "Give a reason."
            )

    def text(self) -> str:
        return str(self.cleaned_data.get("reason") or "")


class ToolApprovalForm(forms.Form):
    expected_hash = forms.CharField(widget=forms.HiddenInput)
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 80}))
    acknowledge_findings = forms.BooleanField(
        required=False, label="I have read the scanner's findings for this definition"
    )


class ToolRevokeForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        error_messages={"required": "Give a reason for revoking the approval."},
    )


class PermissionClassForm(forms.Form):
    permission_class = forms.ChoiceField(
        choices=[("", "From annotations"), *PermissionClass.choices], required=False
    )
