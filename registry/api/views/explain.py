"""`GET /api/v1/catalogue/explain?tool=NAME` (or `?resource=URI`, `?prompt=NAME`): why the agent's
team and role can (or cannot) use a tool, read a resource or get a prompt, rule by rule, from
`registry.access.explain.access_explain` (`registry.access.explain_items.item_explain`).

An agent asks about its own team and role only (both come from its token; there is no parameter
to name another). A name that is neither of an approved server nor covered by one of the team's
grants answers 404 exactly like a name that does not exist, so nothing about servers the team
cannot browse, or about other teams' grants, leaks through it.
"""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed, NotFound
from rest_framework.request import Request

from registry.access.explain import (
    RULES,
    AccessExplanation,
    access_explain,
    tool_for_agent_name,
)
from registry.access.explain_items import expansion_of, item_explain, item_for_agent_name
from registry.api.authentication import INVALID_TOKEN_MESSAGE
from registry.api.views.catalogue import ERROR_RESPONSES, AgentView
from registry.teams.callers import caller_mark_used
from registry.teams.models import TeamRole


class ExplainQuerySerializer(serializers.Serializer[Any]):
    tool = serializers.CharField(
        max_length=200, required=False, help_text="The tool's catalogue name (`<server>__<tool>`)."
    )
    resource = serializers.CharField(
        max_length=2000,
        required=False,
        help_text="A resource's URI (or a resource template's) as the gateway's "
        "`resources/list` (`resources/templates/list`) gives it: "
        "`toolroom://<server>/<the server's URI, percent-encoded>`. A concrete URI expanded "
        "from a resource template is explained as the template the gateway reads it through.",
    )
    prompt = serializers.CharField(
        max_length=200,
        required=False,
        help_text="A prompt's name as the gateway's `prompts/list` gives it "
        "(`<server>__<prompt>`).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if len(attrs) != 1:
            raise serializers.ValidationError({"tool": ["Name one tool, resource or prompt."]})
        return attrs


class RuleResultSerializer(serializers.Serializer[Any]):
    rule = serializers.ChoiceField(choices=RULES)
    passed = serializers.BooleanField()
    at_call_time = serializers.BooleanField(
        help_text="A rule the gateway adds at call time (the catalogue does not apply it)."
    )
    code = serializers.CharField(help_text="The call check's refusal code when it fails.")
    reason = serializers.CharField()
    facts = serializers.DictField()


class AccessExplanationSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    team = serializers.CharField()
    role = serializers.CharField()
    server = serializers.CharField()
    kind = serializers.ChoiceField(choices=["tool", "resource", "prompt"])
    tool = serializers.CharField(required=False, help_text="The tool's name on its server.")
    resource = serializers.CharField(required=False, help_text="The resource's URI on its server.")
    prompt = serializers.CharField(required=False, help_text="The prompt's name on its server.")
    at = serializers.DateTimeField()
    verdict = serializers.ChoiceField(
        choices=["callable", "in catalogue, refused at call time", "not available"]
    )
    in_catalogue = serializers.BooleanField()
    callable = serializers.BooleanField()
    code = serializers.CharField()
    first_failing_rule = serializers.CharField(allow_null=True)
    expanded_uri = serializers.CharField(
        required=False,
        help_text="The concrete URI asked about when it is read through a resource template "
        "(`name` is then the template's): the oldest of the server's templates it is an "
        "expansion of (RFC 6570), as the gateway reads it.",
    )
    rules = RuleResultSerializer(many=True)


class ExplainView(AgentView):
    @extend_schema(
        operation_id="catalogue_explain",
        summary="Why the agent can (or cannot) use a tool, read a resource or get a prompt",
        description="The verdict (in the catalogue, callable) and, for every rule in the order "
        "the gateway applies them, whether it passes and the facts behind it: the team's grants "
        "(scope, role, expiry, who granted, the access request), the server's review status, "
        "the tool's approval (hash, approver, note, findings acknowledged) and whether the "
        "current definition is still the approved one, the role's permission classes against "
        "the tool's, health, the gateway mode, the circuit and the private-data ratchet (of "
        "this token, and for a person's token the person). Only the agent's own team and role. "
        "A resource or prompt goes through the same rules: only a grant of its whole server "
        "covers it, it is read-class, and its own review (approved at its current definition) "
        "stands for the tool's approval.",
        parameters=[ExplainQuerySerializer],
        responses={
            200: AccessExplanationSerializer,
            404: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="No such tool, resource or prompt for this team (error format).",
            ),
            **ERROR_RESPONSES,
        },
        tags=["catalogue"],
    )
    def get(self, request: Request) -> JsonResponse:
        query = ExplainQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        [(kind, name)] = query.validated_data.items()
        identity = self.identity()
        role = (
            TeamRole.objects.select_related("team")
            .filter(pk=identity.role_id, team_id=identity.team_id)
            .first()
        )
        if role is None:  # the token's role or team is gone
            raise AuthenticationFailed(INVALID_TOKEN_MESSAGE)
        explanation: AccessExplanation | None = None
        if kind == "tool":
            tool = tool_for_agent_name(team=role.team, name=name)
            if tool is not None:
                explanation = access_explain(team=role.team, role=role, tool=tool, caller=identity)
        else:
            item = item_for_agent_name(team=role.team, kind=kind, name=name)
            if item is not None:
                explanation = item_explain(
                    team=role.team,
                    role=role,
                    item=item,
                    caller=identity,
                    expanded_uri=expansion_of(item, name),
                )
        if explanation is None:
            raise NotFound(f"No {kind} named '{name}' is available to this team.")
        caller_mark_used(identity, may_write_database=True)
        response = JsonResponse(explanation.as_dict())
        response["Cache-Control"] = "private, no-store"
        return response
