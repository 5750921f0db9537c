"""Forms of the vetting workplace: a server form that never shows secrets back, decision forms."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from registry.core.secret_fields import MASK, mask_secret
from registry.servers.dependency_locks import LockError, dependencies_resolve, lock_matches
from registry.servers.importing.launchers import LauncherError, PackagePin, launcher_adopt
from registry.servers.importing.package_versions import PackageLookupError
from registry.servers.models import McpServer, PermissionClass, Transport, UpstreamAuth
from registry.servers.oauth_probe import has_authorization_header, oauth_resource_metadata
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
        elif MASK in value:
            # The mask stands for the value stored under this very name; a renamed or new entry
            # has none, and the mask itself must never become the secret.
            raise ValidationError(
                f"{name} (line {number}) holds the mask {MASK} but no value is stored under "
                "that name (a renamed entry does not take its old value along): type the value."
            )
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
    env_not_secret = forms.CharField(
        label="Env values that are not secret",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60, "spellcheck": "false"}),
        help_text="One env name per line (a path, a log level): its value is shown as it is "
        "in errors and in the call audit instead of masked.",
    )
    storage = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60, "spellcheck": "false"}),
        help_text="Sandboxed servers: one volume per line, 'PATH SCOPE SIZE_MB', e.g. "
        "'/data team 64'; scope is server, team or conversation (as narrow as the gateway's "
        "isolation scope at most). Kept across restarts; listed below with what they hold.",
    )

    class Meta:
        model = McpServer
        # env and headers are edited through the masked text fields above; the dependency lock
        # is resolved (clean), never typed.
        fields = sorted(SERVER_EDITABLE_FIELDS - SECRET_FIELDS - {"package_lock"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["env_text"].initial = secrets_as_text(self.instance.env or {})
        self.fields["headers_text"].initial = secrets_as_text(
            self.instance.headers or {}, separator=": "
        )
        self.initial["egress_allowlist"] = "\n".join(self.instance.egress_allowlist or [])
        self.initial["env_not_secret"] = "\n".join(self.instance.env_not_secret or [])
        self.initial["storage"] = "\n".join(
            f"{item.get('path')} {item.get('scope')} {item.get('size_mb')}"
            for item in self.instance.storage or []
        )

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

    def clean_env_not_secret(self) -> list[str]:
        text = self.cleaned_data.get("env_not_secret") or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def clean_storage(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        for number, line in enumerate((self.cleaned_data.get("storage") or "").splitlines(), 1):
            words = line.split()
            if not words:
                continue
            if len(words) != 3 or not words[2].isdigit():
                raise forms.ValidationError(
                    f"Line {number}: write PATH SCOPE SIZE_MB, e.g. '/data team 64'."
                )
            entries.append({"path": words[0], "scope": words[1], "size_mb": int(words[2])})
        return entries

    def clean_egress_allowlist(self) -> list[str]:
        text = self.cleaned_data.get("egress_allowlist") or ""
        return [line.strip() for line in text.splitlines() if line.strip()]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        self._adopt_launcher(cleaned)
        self._lock_dependencies(cleaned)
        self._recognise_person_oauth(cleaned)
        return cleaned

    def _recognise_person_oauth(self, cleaned: dict[str, Any]) -> None:
        """A new (or moved) HTTP server that answers 401 naming its OAuth resource metadata
        signs each person in: it is saved as a per-person server, as an import would."""
        url = cleaned.get("url") or ""
        if (
            not settings.TOOLROOM_IMPORT_PROBE_OAUTH
            or cleaned.get("transport") != Transport.STREAMABLE_HTTP
            or cleaned.get("upstream_auth") != UpstreamAuth.SHARED
            or (self.instance.pk is not None and url == self.instance.url)
            or has_authorization_header(cleaned.get("headers_text"))
        ):
            return
        metadata = oauth_resource_metadata(url)
        if not metadata:
            return
        cleaned["upstream_auth"] = UpstreamAuth.PERSON_OAUTH
        self.adopted_fields.add("upstream_auth")
        self.launcher_notes.append(
            f"It answers 401 without a token and names its OAuth resource metadata "
            f"({metadata[:200]}): it signs each person in with their own account, so it is saved "
            "as a per-person server (each person's OAuth). People link their accounts under "
            "Connected accounts; link yours for discovery on this page."
        )

    def _lock_dependencies(self, cleaned: dict[str, Any]) -> None:
        """A package that is new or moved gets its dependency tree resolved and recorded, as
        an import does; a lock that still fits is kept."""
        registry = cleaned.get("package_registry") or ""
        identifier = cleaned.get("package_identifier") or ""
        version = cleaned.get("package_version") or ""
        current = self.instance.package_lock or {}
        if registry not in ("pypi", "npm") or not identifier or not version:
            if current:
                cleaned["package_lock"] = {}
                self.adopted_fields.add("package_lock")
            return
        if lock_matches(current, registry=registry, identifier=identifier, version=version):
            return
        if not settings.TOOLROOM_IMPORT_LOCK_DEPENDENCIES:
            if current:  # a lock of another version would be refused: it goes
                cleaned["package_lock"] = {}
                self.adopted_fields.add("package_lock")
            return
        try:
            lock = dependencies_resolve(registry=registry, identifier=identifier, version=version)
        except LockError as exc:
            self.add_error("package_version", exc.message)
            return
        cleaned["package_lock"] = lock.as_json()
        self.adopted_fields.add("package_lock")
        self.launcher_notes.append(f"Dependencies locked: {lock.summary()}.")

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
        # The model validates env and headers (and the lock) with everything else.
        if "package_lock" in self.cleaned_data:
            self.instance.package_lock = self.cleaned_data["package_lock"]
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
