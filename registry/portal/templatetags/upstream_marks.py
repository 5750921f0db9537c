"""The "needs your account" mark of a per-person tool on the portal's catalogue tables."""

from __future__ import annotations

from collections.abc import Mapping

from django import template

from registry.catalogue.selectors import CatalogueTool
from registry.servers.models import PER_PERSON_MODES

register = template.Library()


@register.filter
def account_state(tool: CatalogueTool, states: Mapping[str, str]) -> str:
    """'' for a shared server's tool; else the person's account there: linked, broken or
    not_linked (`states`: their accounts' states by server slug)."""
    if tool.upstream_auth not in PER_PERSON_MODES:
        return ""
    state = states.get(tool.server_slug, "")
    return state if state in ("linked", "broken") else "not_linked"
