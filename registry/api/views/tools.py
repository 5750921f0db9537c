"""`POST /api/v1/tools/{name}/call`: call a tool of the agent's catalogue without speaking MCP.

The call itself (the check, the upstream, the audit) is the gateway's: this view authenticates
the agent and forwards the call to the gateway (`TOOLROOM_GATEWAY_INTERNAL_URL`), so one base URL
serves agents whether or not a reverse proxy sends `/api/v1/tools/` to the gateway directly. Only
when the gateway is out of reach does the view run `call_check` itself, to answer (and record) a
refusal as the gateway would, or else that the gateway is unavailable: a call is checked once.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import quote

import httpx2
from django.conf import settings
from django.http import HttpResponse, JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.views import APIView

from registry.access.private_data import rest_conversation_key
from registry.api.authentication import AgentTokenAuthentication
from registry.api.permissions import IsAgent
from registry.core.api_errors import api_error_body
from registry.gateway.checks import call_check, refusal_http_status
from registry.gateway.models import CallOutcome
from registry.gateway.result_formats import RESULT_FORMATS, result_format_error
from registry.gateway.services import tool_call_refusal_record
from registry.teams.callers import PersonIdentity, caller_key
from registry.teams.tokens import AgentIdentity

logger = logging.getLogger(__name__)

CONVERSATION_HEADER = "Mcp-Conversation-Id"
# The gateway answers within the server's call deadline (at most 600 s) plus a margin.
FORWARD_TIMEOUT_SECONDS = 630.0


class ToolCallInputSerializer(serializers.Serializer[Any]):
    arguments = serializers.DictField(required=False, default=dict)


class ToolCallResultSerializer(serializers.Serializer[Any]):
    content = serializers.ListField(child=serializers.DictField())
    structuredContent = serializers.DictField(allow_null=True)
    isError = serializers.BooleanField()


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(api_error_body(code, message), status=status)


class ToolCallView(APIView):
    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [IsAgent]

    @extend_schema(
        operation_id="tool_call",
        summary="Call a tool of the agent's catalogue",
        description="Calls the tool by its catalogue name (`<server>__<tool>`) after the same "
        "checks as the MCP gateway: token, grant and its expiry, role, server approved, tool "
        "approved at its current definition, arguments against the approved input schema. "
        "Returns the tool's MCP result (content, structuredContent, isError); with "
        "`format=openai` a Responses API `function_call_output` item (add its `call_id`), with "
        "`format=anthropic` a Messages API `tool_result` block (add its `tool_use_id`): text, "
        "images, resource links and embedded resources in the parts each SDK accepts. Another "
        "`format` answers 400 before the tool runs. A tool of another team answers 404 like one "
        "that does not exist; refusals 403 (with a code and the reason); upstream failures 502, "
        "503 or 504. `Mcp-Conversation-Id` names the conversation (private-data ratchet).",
        request=ToolCallInputSerializer,
        parameters=[
            OpenApiParameter(
                "format",
                OpenApiTypes.STR,
                OpenApiParameter.QUERY,
                required=False,
                enum=list(RESULT_FORMATS),
                description="The shape of the result: mcp (default), openai or anthropic.",
            ),
            OpenApiParameter(
                CONVERSATION_HEADER,
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                required=False,
                description="An id of the agent's conversation.",
            ),
        ],
        responses={
            200: OpenApiResponse(
                ToolCallResultSerializer,
                description="The result (the shape `format` asks for; MCP's by default).",
            ),
            400: OpenApiResponse(
                OpenApiTypes.OBJECT, description="Arguments do not match, or an unknown format."
            ),
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
        started = time.time()
        fmt = request.query_params.get("format") or "mcp"
        format_error = result_format_error(fmt)
        if format_error is not None:  # said before anything runs
            return _error(400, "invalid_format", format_error)
        body = ToolCallInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        identity = request.auth
        assert isinstance(identity, AgentIdentity | PersonIdentity)  # noqa: S101 (IsAgent did)
        conversation = request.headers.get(CONVERSATION_HEADER, "")
        conversation_key = rest_conversation_key(
            caller=caller_key(identity), conversation=conversation
        )
        arguments = body.validated_data["arguments"]
        headers = {"Authorization": request.headers.get("Authorization", "")}
        if conversation:
            headers[CONVERSATION_HEADER] = conversation
        url = (
            settings.TOOLROOM_GATEWAY_INTERNAL_URL.rstrip("/")
            + f"/api/v1/tools/{quote(name, safe='')}/call?format={fmt}"
        )
        try:
            answer = httpx2.post(
                url,
                json={"arguments": arguments},
                headers=headers,
                timeout=FORWARD_TIMEOUT_SECONDS,
                trust_env=False,
            )
        except httpx2.HTTPError as exc:
            logger.warning("the gateway at %s is not reachable: %s", url, exc)
        else:
            forwarded = HttpResponse(
                answer.content, status=answer.status_code, content_type="application/json"
            )
            if "retry-after" in answer.headers:  # a quota's 429 says when to try again
                forwarded["Retry-After"] = answer.headers["retry-after"]
            return forwarded
        # The gateway did not answer: the check it would have made, answered and recorded here.
        decision = call_check(identity=identity, name=name, arguments=arguments)
        if decision.allowed:
            outcome, code, message, status = (
                CallOutcome.FAILED,
                "gateway_unavailable",
                "The Toolroom gateway is not reachable.",
                503,
            )
        else:
            outcome, code, message = CallOutcome.REFUSED, decision.code, decision.message
            status = refusal_http_status(decision.code)
        tool_call_refusal_record(
            identity=identity,
            name=name,
            server_slug=decision.server_slug,
            arguments=arguments,
            conversation=conversation_key,
            code=code,
            message=message,
            outcome=outcome,
            started_at=started,
        )
        return _error(status, code, message)
