"""What agents read: their catalogue in every format, client configs, the pre-flight, and the
official MCP registry's `GET /v0.1/servers` for their team.

Every answer carries an ETag from the team's catalogue version; `If-None-Match` gets a 304 with
no database query (the token lookup and the version both come from the cache). Bodies come from
the document cache when they can. While the cache is unavailable every answer comes from the
database and says so: `X-Toolroom-Degraded: cache`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpResponse, HttpResponseNotModified
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request
from rest_framework.views import APIView

from registry.api.authentication import INVALID_TOKEN_MESSAGE, AgentTokenAuthentication
from registry.api.catalogue_query import (
    CatalogueQuerySerializer,
    catalogue_headers,
    catalogue_query,
    catalogue_query_document,
)
from registry.api.permissions import IsAgent
from registry.api.serializers import ClientConfigQuerySerializer, OfficialListQuerySerializer
from registry.catalogue.client_configs import render_client_config
from registry.catalogue.documents import (
    CatalogueDocument,
    catalogue_document,
    catalogue_etag,
    declarations_digest,
    etag_matches,
)
from registry.catalogue.formats import (
    gateway_url,
    preflight_data,
    registry_namespace,
    render_official_list,
)
from registry.catalogue.selectors import (
    Catalogue,
    UnknownRole,
    catalogue_for_agent,
    catalogue_preflight,
)
from registry.catalogue.versions import CatalogueState, catalogue_state
from registry.core.cache import degraded_marker
from registry.teams.callers import Caller, PersonIdentity, caller_mark_used
from registry.teams.tokens import AgentIdentity

ERROR_RESPONSES = {
    400: OpenApiResponse(OpenApiTypes.OBJECT, description="Invalid parameters (error format)."),
    401: OpenApiResponse(
        OpenApiTypes.OBJECT,
        description="Missing, invalid, expired or revoked agent token (error format).",
    ),
    403: OpenApiResponse(OpenApiTypes.OBJECT, description="Not an agent token (error format)."),
}
NOT_MODIFIED = {304: OpenApiResponse(description="Unchanged since the ETag sent in If-None-Match.")}
IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="The ETag of the copy the agent holds; 304 when it is still current.",
)


def public_url(request: Request) -> str:
    return settings.TOOLROOM_PUBLIC_URL or request.build_absolute_uri("/")


def _build(identity: Caller, category: str | None = None) -> Catalogue:
    try:
        return catalogue_for_agent(
            team_id=identity.team_id, role_id=identity.role_id, category=category
        )
    except UnknownRole as exc:  # the token's role or team is gone
        raise AuthenticationFailed(INVALID_TOKEN_MESSAGE) from exc


class AgentView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]

    def identity(self) -> Caller:
        identity = self.request.auth
        assert isinstance(identity, AgentIdentity | PersonIdentity)  # noqa: S101 (IsAgent did)
        return identity

    def conditional(
        self, variant: str, document: Callable[[CatalogueState, str], CatalogueDocument]
    ) -> HttpResponse:
        """304 for a current ETag, else the document for the team's state and the ETag."""
        identity = self.identity()
        state = catalogue_state(team_id=identity.team_id)
        etag = catalogue_etag(identity=identity, state=state, variant=variant)
        if etag_matches(self.request.headers.get("If-None-Match", ""), etag):
            caller_mark_used(identity, may_write_database=False)
            response: HttpResponse = HttpResponseNotModified()
        else:
            answer = document(state, etag)
            caller_mark_used(identity, may_write_database=True)
            response = HttpResponse(answer.body, content_type="application/json")
            response["X-Toolroom-Cache"] = "hit" if answer.from_cache else "miss"
        for name, value in catalogue_headers(etag=etag, degraded=degraded_marker()):
            response[name] = value
        return response


def built(
    build: Callable[[CatalogueState], dict[str, Any] | bytes],
) -> Callable[[CatalogueState, str], CatalogueDocument]:
    """A document from the document cache, or built by `build` (and kept)."""
    return lambda state, etag: catalogue_document(etag=etag, build=lambda: build(state))


class CatalogueView(AgentView):
    @extend_schema(
        operation_id="catalogue",
        summary="The agent's tool catalogue",
        description="The tools the agent's team and role may use: approved, granted, allowed by "
        "the role; unhealthy servers' tools are flagged. Names are namespaced by server "
        "(`<server>__<tool>`). `format` picks the shape: `native` (full metadata and the "
        "pre-flight of declared servers), `mcp` (a tools/list result), `openai` (function "
        "tools), `anthropic` (tool definitions). With `q`, only the tools matching its words, "
        "best first, at most `limit` (default 10, at most 50): the same tools and formats, ranked "
        "by the database's full-text search and one BM25F ranking; a native answer then carries "
        "`search`.",
        parameters=[CatalogueQuerySerializer, IF_NONE_MATCH],
        responses={
            200: OpenApiResponse(OpenApiTypes.OBJECT, description="The catalogue."),
            **NOT_MODIFIED,
            **ERROR_RESPONSES,
        },
        tags=["catalogue"],
    )
    def get(self, request: Request) -> HttpResponse:
        serializer = CatalogueQuerySerializer(data=request.query_params)
        serializer.is_valid(raise_exception=True)
        query = catalogue_query(serializer.validated_data)
        identity = self.identity()

        def document(state: CatalogueState, etag: str) -> CatalogueDocument:
            try:
                return catalogue_query_document(
                    identity=identity, state=state, query=query, etag=etag
                )
            except UnknownRole as exc:  # the token's role or team is gone
                raise AuthenticationFailed(INVALID_TOKEN_MESSAGE) from exc

        return self.conditional(query.variant(identity), document)


class ClientConfigView(AgentView):
    @extend_schema(
        operation_id="catalogue_client_config",
        summary="An MCP client configuration (mcp.json) for the team",
        description="The entry each MCP client accepts for the team's endpoint on the Toolroom "
        "gateway; the token stays out of the file. `client=claude-code` (the default; `claude` "
        "too): `mcpServers` with `${TOOLROOM_AGENT_TOKEN}`, which Claude Code expands. "
        "`claude-desktop`: `mcpServers` running mcp-remote, the token in its `env`. `vscode`: "
        "`servers` with a password input. `cursor`: `mcpServers` with "
        "`${env:TOOLROOM_AGENT_TOKEN}`. `inspector`: the Inspector's config file, without the "
        'header (pass `--header "Authorization: Bearer $TOOLROOM_AGENT_TOKEN"` on its command '
        "line: it expands nothing in the file). Another value answers 400 naming the choices.",
        parameters=[ClientConfigQuerySerializer, IF_NONE_MATCH],
        responses={
            200: OpenApiResponse(OpenApiTypes.OBJECT, description="The client config."),
            **NOT_MODIFIED,
            **ERROR_RESPONSES,
        },
        tags=["catalogue"],
    )
    def get(self, request: Request) -> HttpResponse:
        query = ClientConfigQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        client: str = query.validated_data["client"]
        identity = self.identity()
        url = public_url(request)

        def build(state: CatalogueState) -> dict[str, Any]:
            return render_client_config(_build(identity), client=client, gateway=gateway_url(url))

        return self.conditional(f"client|{client}|{url}", built(build))


class PreflightView(AgentView):
    @extend_schema(
        operation_id="catalogue_preflight",
        summary="Whether the servers the agent declared are there",
        description="For each declared server (required, recommended, optional): ok, degraded, "
        "unhealthy, not_granted, no_visible_tools or unavailable. `ok` is false when a required "
        "server is not usable, so an agent can fail fast.",
        parameters=[IF_NONE_MATCH],
        responses={
            200: OpenApiResponse(OpenApiTypes.OBJECT, description="The pre-flight."),
            **NOT_MODIFIED,
            **ERROR_RESPONSES,
        },
        tags=["catalogue"],
    )
    def get(self, request: Request) -> HttpResponse:
        identity = self.identity()

        def build(state: CatalogueState) -> dict[str, Any]:
            preflight = catalogue_preflight(
                catalogue=_build(identity), declared_servers=identity.declared_servers
            )
            return {"version": state.version, **preflight_data(preflight)}

        return self.conditional(
            f"preflight|{declarations_digest(identity) or identity.token_id}", built(build)
        )


def _decode_cursor(cursor: str | None) -> str:
    if not cursor:
        return ""
    try:
        return base64.urlsafe_b64decode(cursor.encode() + b"==").decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return "\uffff"  # past every slug: an empty page, not an error


def _encode_cursor(slug: str) -> str:
    return base64.urlsafe_b64encode(slug.encode()).decode().rstrip("=")


class OfficialServerListView(AgentView):
    @extend_schema(
        operation_id="official_servers_list",
        summary="The team's servers in the official MCP registry API shape (v0.1)",
        description="Servers the agent's catalogue includes, as `ServerResponse` objects. Each "
        "remote is the team's Toolroom gateway endpoint. Cursor pagination (`metadata."
        "nextCursor`), `search` by name or slug.",
        parameters=[OfficialListQuerySerializer, IF_NONE_MATCH],
        responses={
            200: OpenApiResponse(OpenApiTypes.OBJECT, description="A ServerList."),
            **NOT_MODIFIED,
            **ERROR_RESPONSES,
        },
        tags=["official registry API"],
    )
    def get(self, request: Request) -> HttpResponse:
        query = OfficialListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        after = _decode_cursor(query.validated_data.get("cursor"))
        limit: int = query.validated_data["limit"]
        search: str = query.validated_data.get("search", "").lower()
        version: str = query.validated_data.get("version", "")
        identity = self.identity()
        url = public_url(request)

        def build(state: CatalogueState) -> dict[str, Any]:
            servers = [
                server
                for server in _build(identity).servers
                if server.slug > after
                and (not search or search in server.name.lower() or search in server.slug)
                and (not version or version in ("latest", server.version))
            ]
            page = servers[:limit]
            next_cursor = _encode_cursor(page[-1].slug) if len(servers) > limit else None
            return render_official_list(
                page,
                namespace=registry_namespace(url, settings.TOOLROOM_REGISTRY_NAMESPACE),
                public_url=url,
                next_cursor=next_cursor,
            )

        return self.conditional(f"official|{after}|{limit}|{search}|{version}|{url}", built(build))
