"""Secrets at rest: a model field that stores a JSON object encrypted with Fernet, and masking.

Keys come from TOOLROOM_SECRETS_KEY (comma-separated Fernet keys: the first encrypts, every key
decrypts, so keys can be rotated with `manage.py rotate_secrets_key`). Values are decrypted only
when a worker needs them to launch or connect to a server; people see them masked.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import models

MASK = "••••••••"


@cache
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    try:
        return MultiFernet([Fernet(key.strip().encode()) for key in keys if key.strip()])
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(
            "TOOLROOM_SECRETS_KEY must hold Fernet keys (32 url-safe base64-encoded bytes), "
            "comma-separated; make one with: python -c 'from cryptography.fernet import Fernet; "
            "print(Fernet.generate_key().decode())'"
        ) from exc


def secrets_cipher() -> MultiFernet:
    return _fernet(tuple(settings.TOOLROOM_SECRETS_KEYS))


def encrypt_text(plain: str) -> str:
    return secrets_cipher().encrypt(plain.encode("utf-8")).decode("ascii")


def decrypt_text(token: str) -> str:
    try:
        return secrets_cipher().decrypt(token.encode("ascii")).decode("utf-8")
    except InvalidToken as exc:
        raise ImproperlyConfigured(
            "A stored secret cannot be decrypted with TOOLROOM_SECRETS_KEY: the key changed "
            "without the old one being kept for rotation."
        ) from exc


def mask_secret(value: str) -> str:
    """Show that a secret is set without showing any of it (not even its last characters,
    which narrow a guess and tell the same secret apart across servers)."""
    if not value:
        return "(empty)"
    return MASK


# Shorter values (a region, a flag, "true") are too common to find in text without masking
# ordinary words; secrets worth the name are longer.
REDACT_MIN_LENGTH = 6


def _redactable(secrets: Iterable[str]) -> list[str]:
    found: set[str] = set()
    for value in secrets:
        if not value:
            continue
        found.add(value)
        # "Bearer abc...": the credential after the scheme leaks on its own too.
        found.update(value.split()[1:])
    return sorted((v for v in found if len(v) >= REDACT_MIN_LENGTH), key=len, reverse=True)


def secret_redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every known secret value replaced by the mask (stderr, errors, reports)."""
    for value in _redactable(secrets):
        text = text.replace(value, MASK)
    return text


def secret_redact_in(data: Any, secrets: Iterable[str]) -> Any:
    """`secret_redact` applied to every string inside JSON-like data."""
    values = _redactable(secrets)
    if not values:
        return data

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            for value in values:
                item = item.replace(value, MASK)
            return item
        if isinstance(item, dict):
            return {walk(key): walk(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [walk(inner) for inner in item]
        return item

    return walk(data)


def mask_mapping(values: dict[str, str]) -> dict[str, str]:
    return {name: mask_secret(value) for name, value in values.items()}


class EncryptedJSONField(models.TextField[dict[str, str], dict[str, str]]):
    """A dict of str -> str, stored as a Fernet token; never queryable, never logged."""

    description = "Encrypted mapping of names to secret values"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("default", dict)
        kwargs.setdefault("blank", True)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        if kwargs.get("default") is dict:
            del kwargs["default"]
        if kwargs.get("blank") is True:
            del kwargs["blank"]
        return name, path, args, kwargs

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> dict[str, str]:
        if not value:
            return {}
        return dict(json.loads(decrypt_text(value)))

    def to_python(self, value: Any) -> dict[str, str]:
        if value is None or value == "":
            return {}
        if isinstance(value, dict):
            return value
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValidationError("Enter a JSON object of names to values.") from exc
            if isinstance(parsed, dict):
                return parsed
        raise ValidationError("Enter a JSON object of names to values.")

    def get_prep_value(self, value: Any) -> str:
        mapping = self.to_python(value)
        return encrypt_text(json.dumps(mapping, sort_keys=True))

    def value_to_string(self, obj: models.Model) -> str:
        # Serialisation (dumpdata, fixtures) never carries plain secrets.
        return json.dumps(mask_mapping(self.value_from_object(obj)))

    def validate(self, value: Any, model_instance: models.Model | None) -> None:
        super().validate(value, model_instance)
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ValidationError("Names and values must all be text.")
