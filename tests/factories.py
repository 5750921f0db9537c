"""factory_boy factories for Toolroom's models; they build rows the way the services would."""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth.models import User

from registry.core.canonical import definition_hash
from registry.servers.models import (
    Category,
    McpServer,
    ReviewStatus,
    ServerStatus,
    Tool,
    ToolRevision,
    Transport,
)
from registry.servers.policy import TrustTier
from registry.servers.tool_definitions import derive_permission_class


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = User
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("correct horse battery staple")


class CategoryFactory(factory.django.DjangoModelFactory[Category]):
    class Meta:
        model = Category
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"category-{n}")
    name = factory.LazyAttribute(lambda c: c.slug.replace("-", " ").title())


class McpServerFactory(factory.django.DjangoModelFactory[McpServer]):
    class Meta:
        model = McpServer
        skip_postgeneration_save = True

    slug = factory.Sequence(lambda n: f"server-{n}")
    name = factory.LazyAttribute(lambda s: s.slug.replace("-", " ").title())
    transport = Transport.STDIO
    command = factory.LazyFunction(lambda: ["python", "-m", "mcp_server_time"])
    trust_tier = TrustTier.BUILTIN
    review_status = ReviewStatus.DRAFT

    @factory.post_generation
    def with_status(self, create: bool, extracted: Any, **kwargs: Any) -> None:
        if create:
            ServerStatus.objects.get_or_create(server=self)


def tool_definition(name: str, **extra: Any) -> dict[str, Any]:
    definition: dict[str, Any] = {
        "name": name,
        "description": f"The {name} tool.",
        "inputSchema": {"type": "object", "properties": {"value": {"type": "string"}}},
    }
    definition.update(extra)
    return definition


class ToolFactory(factory.django.DjangoModelFactory[Tool]):
    """A tool as discovery would store it: definition, hash, first revision."""

    class Meta:
        model = Tool
        skip_postgeneration_save = True

    server = factory.SubFactory(McpServerFactory)
    name = factory.Sequence(lambda n: f"tool_{n}")
    definition = factory.LazyAttribute(lambda t: tool_definition(t.name))
    description = factory.LazyAttribute(lambda t: t.definition.get("description", ""))
    input_schema = factory.LazyAttribute(lambda t: t.definition.get("inputSchema", {}))
    annotations = factory.LazyAttribute(lambda t: t.definition.get("annotations", {}))
    definition_hash = factory.LazyAttribute(lambda t: definition_hash(t.definition))
    permission_class_derived = factory.LazyAttribute(
        lambda t: derive_permission_class(
            t.definition.get("annotations", {}), trust_tier=t.server.trust_tier
        )
    )

    @factory.post_generation
    def with_revision(self, create: bool, extracted: Any, **kwargs: Any) -> None:
        if create:
            ToolRevision.objects.get_or_create(
                tool=self,
                definition_hash=self.definition_hash,
                defaults={"definition": self.definition},
            )


# --- Teams, grants, agent tokens (built through the services, as the admin and API do) ---------


class TeamFactory(factory.django.DjangoModelFactory[Any]):
    """A team with its Django group, guardian permission and default roles."""

    class Meta:
        model = "teams.Team"

    slug = factory.Sequence(lambda n: f"team-{n}")
    name = factory.LazyAttribute(lambda t: t.slug.replace("-", " ").title())

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> Any:
        from registry.teams.services import team_create

        return team_create(actor="factory", slug=kwargs["slug"], name=kwargs["name"])


class GrantFactory(factory.django.DjangoModelFactory[Any]):
    class Meta:
        model = "teams.Grant"

    team = factory.SubFactory(TeamFactory)
    server = factory.SubFactory(McpServerFactory)
    tool = None
    role = None
    expires_at = None

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> Any:
        from registry.teams.services import grant_create

        return grant_create(actor="factory", **kwargs)


class AgentTokenFactory(factory.django.DjangoModelFactory[Any]):
    """An agent token; the plain token is on `.plain` (the services show it once)."""

    class Meta:
        model = "teams.AgentToken"

    team = factory.SubFactory(TeamFactory)
    role = factory.LazyAttribute(lambda t: t.team.roles.get(name="operations"))
    name = factory.Sequence(lambda n: f"agent-{n}")
    expires_at = None
    declared_servers = None

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> Any:
        from registry.teams.services import agent_token_create

        created = agent_token_create(actor="factory", **kwargs)
        created.token.plain = created.plain
        return created.token
