"""Fill the benchmark database: N approved servers x 20 approved tools, 100 teams each granted 10
servers (so every team's catalogue is 200 tools whatever N is), one agent token per team.

Servers and tools are written in bulk as approved rows (as discovery and approvals would leave
them); teams, grants and tokens go through the services. Prints {"team": "token"} as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", type=int, required=True)
    parser.add_argument("--tools", type=int, default=20)
    parser.add_argument("--teams", type=int, default=100)
    parser.add_argument("--grants-per-team", type=int, default=10)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "registry.settings")
    django.setup()
    # Django must be set up before the models are imported.
    from registry.core.canonical import definition_hash  # noqa: PLC0415
    from registry.servers.models import (  # noqa: PLC0415
        ApprovalState,
        Health,
        McpServer,
        ReviewStatus,
        ServerStatus,
        Tool,
    )
    from registry.teams.services import (  # noqa: PLC0415
        agent_token_create,
        grant_create,
        team_create,
    )

    servers = McpServer.objects.bulk_create(
        McpServer(
            slug=f"server-{n:04d}",
            name=f"Server {n}",
            description=f"Benchmark server number {n}.",
            transport="stdio",
            command=["python", "-m", "bench_server"],
            trust_tier="builtin",
            isolation="local",
            review_status=ReviewStatus.APPROVED,
        )
        for n in range(args.servers)
    )
    ServerStatus.objects.bulk_create(
        ServerStatus(server=server, health=Health.HEALTHY) for server in servers
    )
    tools = []
    for server in servers:
        for k in range(args.tools):
            definition = {
                "name": f"tool_{k:02d}",
                "description": f"Does thing {k} of {server.slug}. " + "Lorem ipsum dolor. " * 8,
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "Where."},
                        "limit": {"type": "integer", "minimum": 1},
                        "verbose": {"type": "boolean"},
                    },
                    "required": ["path"],
                },
                "annotations": {"readOnlyHint": k % 2 == 0},
            }
            digest = definition_hash(definition)
            tools.append(
                Tool(
                    server=server,
                    name=definition["name"],
                    description=definition["description"],
                    input_schema=definition["inputSchema"],
                    annotations=definition["annotations"],
                    definition=definition,
                    definition_hash=digest,
                    approved_definition_hash=digest,
                    approval_state=ApprovalState.APPROVED,
                    permission_class_derived="read" if k % 2 == 0 else "write",
                    permission_class="read" if k % 2 == 0 else "write",
                )
            )
    Tool.objects.bulk_create(tools, batch_size=2000)

    tokens = {}
    per_team = min(args.grants_per_team, args.servers)
    for t in range(args.teams):
        team = team_create(actor="bench", slug=f"team-{t:03d}")
        for k in range(per_team):
            server = servers[(t * 7 + k * 13) % args.servers]
            grant_create(actor="bench", team=team, server=server)
        role = team.roles.get(name="operations")
        tokens[team.slug] = agent_token_create(
            actor="bench", team=team, role=role, name="bench"
        ).plain
    json.dump(tokens, sys.stdout)


if __name__ == "__main__":
    main()
