"""Whether a JSON value is what an SDK's own request types accept: the `openai` and `anthropic`
packages describe request parameters as TypedDicts, which nothing checks at run time, so this
walks a value against such an annotation (TypedDicts strictly: a key they do not declare is an
error, as the APIs refuse it)."""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import typing_extensions

_WRAPPERS = {typing.Required, typing.NotRequired, typing_extensions.Required}
_SEQUENCES = {list, collections.abc.Iterable, collections.abc.Sequence}


def sdk_type_errors(value: Any, annotation: Any, path: str = "$") -> list[str]:
    """Every way `value` differs from `annotation` ([] when the SDK's type accepts it)."""
    origin = get_origin(annotation)
    if annotation is Any:
        return []
    if origin in _WRAPPERS:
        return sdk_type_errors(value, get_args(annotation)[0], path)
    if origin in (Union, types.UnionType):
        alternatives = [sdk_type_errors(value, arm, path) for arm in get_args(annotation)]
        if any(not errors for errors in alternatives):
            return []
        return [f"{path}: none of the types fits; closest: {min(alternatives, key=len)}"]
    if origin is Literal:
        allowed = get_args(annotation)
        return [] if value in allowed else [f"{path}: {value!r} is not one of {allowed}"]
    if annotation is type(None):
        return [] if value is None else [f"{path}: {value!r} is not null"]
    if typing_extensions.is_typeddict(annotation):
        return _typeddict_errors(value, annotation, path)
    if origin in _SEQUENCES:
        if not isinstance(value, list):
            return [f"{path}: not a list"]
        (item,) = get_args(annotation)
        return [e for i, v in enumerate(value) for e in sdk_type_errors(v, item, f"{path}[{i}]")]
    if annotation in (str, bool, int, float):
        fits = isinstance(value, annotation) and not (annotation is int and isinstance(value, bool))
        return [] if fits else [f"{path}: {value!r} is not a {annotation.__name__}"]
    if isinstance(annotation, type):
        return [] if isinstance(value, annotation) else [f"{path}: not a {annotation.__name__}"]
    return [f"{path}: cannot check against {annotation!r}"]


def _typeddict_errors(value: Any, annotation: Any, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: not an object"]
    hints = get_type_hints(annotation, include_extras=True)
    errors = [f"{path}: {key!r} is not a field" for key in value if key not in hints]
    errors += [f"{path}: {key!r} is missing" for key in annotation.__required_keys__ - set(value)]
    for key, item in value.items():
        if key in hints:
            errors += sdk_type_errors(item, hints[key], f"{path}.{key}")
    return errors
