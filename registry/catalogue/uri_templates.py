"""Whether a concrete URI is an expansion of a resource template (RFC 6570): what the gateway
reads a URI through, and what the access explanation matches a URI against."""

from __future__ import annotations

import re
from urllib.parse import unquote

from registry.catalogue.naming import EXPRESSION

# RFC 6570 (URI Template), section 3.2.1: what an expression's values may hold once expanded.
_UNRESERVED = r"A-Za-z0-9\-._~%"  # and pct-encoded octets (checked apart: _BAD_PERCENT)
_RESERVED = r":/?#\[\]@!$&'()*+,;="
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# A dot-segment (RFC 3986, 5.2.4), also percent-encoded: `..` walks out of the template's path.
_DOT_SEGMENT = re.compile(r"(?:^|/)(?:\.|%2[eE]){1,2}(?:/|$|[?#])")
# A URI longer than this is not matched against templates (bounds the regular expressions' work).
MAX_TEMPLATE_URI_CHARS = 8192


def _expression_pattern(expression: str) -> str:
    """What one `{expression}` of a URI template expands to (RFC 6570, 3.2.2 to 3.2.9): simple
    and label, path-segment, path-style, query and continuation expansions allow only unreserved
    characters, percent-encoded octets and their separators, so they never span a `/` (a path
    segment expansion gives one segment per variable, more only when exploded); reserved (`+`)
    and fragment (`#`) expansions may hold reserved characters."""
    body = expression[1:-1]
    operator = body[0] if body and body[0] in "+#./;?&" else ""
    varspecs = [spec for spec in body[len(operator) :].split(",") if spec]
    exploded = any(spec.endswith("*") for spec in varspecs)
    # An exploded associative array expands to `name=value` pairs.
    value = f"[{_UNRESERVED},{'=' if exploded else ''}]*"
    if operator == "":
        return value
    if operator in "+#":
        reserved = f"[{_UNRESERVED}{_RESERVED}]*"
        return reserved if operator == "+" else f"(?:#{reserved})?"
    if operator == ".":
        return f"(?:\\.{value})?"  # labels joined by dots, which `value` holds
    if operator == "/":
        if exploded:
            return f"(?:/{value})*"
        return f"(?:/{value}){{0,{max(1, len(varspecs))}}}"
    # ; ? &: named parameters, `name=value` (or `name` alone for `;`), joined by the operator.
    named = f"[{_UNRESERVED},=]*"
    joiner = re.escape(";" if operator == ";" else "&")
    return f"(?:{re.escape(operator)}{named}(?:{joiner}{named})*)?"


def template_pattern(template: str) -> re.Pattern[str]:
    """A pattern the server's URIs expanded from `template` match, per RFC 6570: a simple
    expansion (`{id}`) never spans `/`."""
    pieces: list[str] = []
    last = 0
    for match in EXPRESSION.finditer(template):
        pieces.append(re.escape(template[last : match.start()]))
        pieces.append(_expression_pattern(match.group(0)))
        last = match.end()
    pieces.append(re.escape(template[last:]))
    return re.compile("".join(pieces))


def template_matches(template: str, pattern: re.Pattern[str], uri: str) -> bool:
    """Whether `uri` is an expansion of `template` (its `pattern`) that stays where the template
    points: well-formed percent-encoding, and no dot-segment (`..`, `%2e%2e`, also once
    percent-decoded) that the template's own text does not have."""
    if len(uri) > MAX_TEMPLATE_URI_CHARS or _BAD_PERCENT.search(uri):
        return False
    if pattern.fullmatch(uri) is None:
        return False
    if _DOT_SEGMENT.search(template) is not None:
        return True
    return _DOT_SEGMENT.search(uri) is None and _DOT_SEGMENT.search(unquote(uri)) is None
