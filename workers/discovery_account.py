"""The admin's account that discovers a per-person server's tools and checks its health, and how
an HTTP server says that it wants OAuth.

A per-person server (`upstream_auth` person_oauth) has no credential of Toolroom's own: discovery
and health checks use the access token of the account an admin linked for discovery
(`UpstreamAccount.for_discovery`), fetched and refreshed exactly as a person's call's is
(registry/upstream/tokens.py). `oauth_challenge` asks a server once, with what the plan would send,
whether it answers 401 naming its protected resource metadata (RFC 9728): a server that signs each
person in with OAuth.
"""

from __future__ import annotations

from dataclasses import replace

import httpx2

from registry.core.mcp_sign_in import (
    HTTP_UNAUTHORIZED,
    resource_metadata_url,
    unauthenticated_initialize,
)
from registry.servers.jobs.launch import LaunchPlan
from registry.upstream.tokens import UpstreamAccountUnusable, discovery_access_token
from workers.adapters.guarded_http import guarded_transport

PERSON_OAUTH = "person_oauth"


def plan_with_discovery_token(
    plan: LaunchPlan, *, refused: str = ""
) -> tuple[LaunchPlan, UpstreamAccountUnusable | None]:
    """The plan with the discovery account's token (refreshed if it expires soon, or in place of
    `refused`), and None; or the plan unchanged and why there is no usable account. Plans of
    other servers come back as they are. Runs queries: call it outside an event loop."""
    if plan.upstream_auth != PERSON_OAUTH:
        return plan, None
    try:
        token = discovery_access_token(server_id=plan.server_id, refused=refused)
    except UpstreamAccountUnusable as exc:
        return replace(plan, upstream_token=""), exc
    return replace(plan, upstream_token=token.access_token), None


async def oauth_challenge(plan: LaunchPlan, *, timeout: float = 10.0) -> str | None:
    """None unless the server answers an initialize (with the plan's headers and token) with
    401; then the resource metadata URL its WWW-Authenticate names ('' when it names none)."""
    if plan.transport not in ("streamable_http", "sse") or not plan.url:
        return None
    headers = {"Accept": "application/json, text/event-stream", **plan.headers}
    if plan.upstream_token:
        headers["Authorization"] = f"Bearer {plan.upstream_token}"
    transport = guarded_transport(allowed_networks=plan.allowed_networks)
    try:
        async with httpx2.AsyncClient(
            transport=transport, timeout=timeout, follow_redirects=False, trust_env=False
        ) as client:
            if plan.transport == "sse":
                answer = await client.get(plan.url, headers=headers)
            else:
                answer = await client.post(
                    plan.url, json=unauthenticated_initialize("toolroom-discovery"), headers=headers
                )
    except httpx2.HTTPError:
        return None
    if answer.status_code != HTTP_UNAUTHORIZED:
        return None
    return resource_metadata_url(answer.headers)
