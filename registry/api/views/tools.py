"""`POST /api/v1/tools/{name}/call`: call a tool of the agent's catalogue without speaking MCP.

The call itself (the upstream, the audit) is the gateway's. This view authenticates the agent,
runs the registry's `call_check` (so a refusal is answered here, without the gateway), and
forwards an allowed call to the gateway (`TOOLROOM_GATEWAY_INTERNAL_URL`), which checks again
from its cache. One base URL therefore serves agents whether or not a reverse proxy sends
`/api/v1/tools/` to the gateway directly.
"""

from __future__ import annotations

import logging
from urllib.parse import quote

import httpx2
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.views import APIView

from registry.api.authentication import AgentTokenAuthentication
from registry.api.permissions import IsAgent
from registry.gateway.calls import call_check, refusal_http_status, rest_conversation_key
from registry.teams.tokens import AgentIdentity

logger = logging.getLogger(__name__)

CONVERSATION_HEADER = "Mcp-Conversation-Id"
# The gateway answers within the server's call deadline (at most 600 s) plus a margin.
FORWARD_TIMEOUT_SECONDS = 630.0


class ToolCallInputSerializer(serializers.Serializer):  # type: ignore[type-arg]
    arguments = serializers.DictField(required=False, default=dict)


class ToolCallResultSerializer(serializers.Serializer):  # type: ignore[type-arg]
    content = serializers.ListField(child=serializers.DictField())
    structuredContent = serializers.DictField(allow_null=True)
    isError = serializers.BooleanField()


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message, "fields": {}}}, status=status)


class ToolCallView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]

    @extend_schema(
        operation_id="tool_call",
        summary="Call a tool of the agent's catalogue",
        description="Calls the tool by its catalogue name (`<server>__<tool>`) after the same "
        "checks as the MCP gateway: token, grant and its expiry, role, server approved, tool "
        "approved at its current definition, arguments against the approved input schema. "
        "Returns the tool's content, structured content and isError, ready to hand back to an "
        "OpenAI or Anthropic function-calling loop. A tool of another team answers 404 like one "
        "that does not exist; refusals 403 (with a code and the reason); upstream failures 502, "
        "503 or 504. `Mcp-Conversation-Id` names the conversation (private-data ratchet).",
        request=ToolCallInputSerializer,
        parameters=[
            OpenApiParameter(
                CONVERSATION_HEADER,
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                required=False,
                description="An id of the agent's conversation.",
            )
        ],
        responses={
            200: ToolCallResultSerializer,
            400: OpenApiResponse(OpenApiTypes.OBJECT, description="Arguments do not match."),
            401: OpenApiResponse(OpenApiTypes.OBJECT, description="Not a valid agent token."),
            403: OpenApiResponse(OpenApiTypes.OBJECT, description="Refused, with the reason."),
            404: OpenApiResponse(OpenApiTypes.OBJECT, description="No such tool for this agent."),
            502: OpenApiResponse(OpenApiTypes.OBJECT, description="The server failed."),
            503: OpenApiResponse(OpenApiTypes.OBJECT, description="Busy, circuit open, down."),
            504: OpenApiResponse(OpenApiTypes.OBJECT, description="No answer in time."),
        },
        tags=["tools"],
    )
    def post(self, request: Request, name: str) -> HttpResponse:
        body = ToolCallInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        identity = request.auth
        assert isinstance(identity, AgentIdentity)  # noqa: S101 (IsAgent made sure)
        conversation = request.headers.get(CONVERSATION_HEADER, "")
        decision = call_check(
            identity=identity,
            name=name,
            arguments=body.validated_data["arguments"],
            conversation=rest_conversation_key(
                token_id=identity.token_id, conversation=conversation
            ),
        )
        if not decision.allowed:
            return _error(refusal_http_status(decision.code), decision.code, decision.message)
        headers = {"Authorization": request.headers.get("Authorization", "")}
        if conversation:
            headers[CONVERSATION_HEADER] = conversation
        url = (
            settings.TOOLROOM_GATEWAY_INTERNAL_URL.rstrip("/")
            + f"/api/v1/tools/{quote(name, safe='')}/call"
        )
        try:
            answer = httpx2.post(
                url,
                json={"arguments": body.validated_data["arguments"]},
                headers=headers,
                timeout=FORWARD_TIMEOUT_SECONDS,
                trust_env=False,
            )
        except httpx2.HTTPError as exc:
            logger.warning("the gateway at %s is not reachable: %s", url, exc)
            return _error(503, "gateway_unavailable", "The Toolroom gateway is not reachable.")
        return HttpResponse(
            answer.content, status=answer.status_code, content_type="application/json"
        )
