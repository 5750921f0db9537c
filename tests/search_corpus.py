"""The labelled search set (tests/data/search): loading its servers and scoring rankings.

`demo_servers.json` holds the demo servers' tools (time and git as their PyPI packages list
them, the others written after their READMEs); `registry.json` 1,000 generated tools on 50
servers (bench/search/make_registry.py); `tasks.json` the natural-language tasks, each with the
tool(s) that should come first and its split: `tune` (t001-t080, the first held-out tasks among
them since their misses were printed) and `held_out_2` (t081-t172, reported once, so tuning data
now too) are the tasks anyone may look at while tuning the ranking; `held_out_3` (t173 on,
written without running the ranking) is the reporting split, never tuned on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from registry.servers.models import McpServer

DATA = Path(__file__).resolve().parent / "data" / "search"


@dataclass(frozen=True)
class Task:
    id: str
    query: str
    expected: tuple[str, ...]
    split: str


def corpus_servers() -> list[dict[str, Any]]:
    demo = json.loads((DATA / "demo_servers.json").read_text())["servers"]
    generated = json.loads((DATA / "registry.json").read_text())["servers"]
    return [*demo, *generated]


def tasks(split: str | None = None) -> list[Task]:
    raw = json.loads((DATA / "tasks.json").read_text())["tasks"]
    return [
        Task(id=t["id"], query=t["query"], expected=tuple(t["expected"]), split=t["split"])
        for t in raw
        if split is None or t["split"] == split
    ]


def load_corpus() -> list[McpServer]:
    """Every server of the set, approved, with every tool approved at its current definition.

    Tools arrive through tool sync (the path that writes the search index); the approvals are
    written as the admin's bulk approval would leave them, in one update, to keep this fast.
    Django imports wait until here: the benchmark scores rankings without Django set up.
    """
    from django.db.models import F

    from registry.servers.models import (
        ApprovalState,
        Category,
        McpServer,
        ReviewStatus,
        Tool,
    )
    from registry.servers.vetting import tool_sync

    servers = []
    for spec in corpus_servers():
        category, _ = Category.objects.get_or_create(
            slug=spec["category"], defaults={"name": spec["category"].replace("-", " ").title()}
        )
        server = McpServer.objects.create(
            slug=spec["slug"],
            name=spec["name"],
            description=spec["description"],
            category=category,
            transport="stdio",
            command=["python", "-m", spec["slug"]],
            trust_tier="builtin",
            review_status=ReviewStatus.APPROVED,
        )
        tool_sync.server_tools_sync(server=server, tools=spec["tools"], actor="test")
        servers.append(server)
    Tool.objects.filter(server__in=servers).update(
        approval_state=ApprovalState.APPROVED, approved_definition_hash=F("definition_hash")
    )
    return servers


@dataclass(frozen=True)
class Scores:
    tasks: int
    recall_at_5: float
    mrr: float
    misses: list[str]


def score(rankings: dict[str, list[str]], labelled: list[Task]) -> Scores:
    """Recall@5 (a task counts when one of its expected tools is in the top 5) and MRR (the
    reciprocal rank of the first expected tool, 0 when none was found)."""
    hits, reciprocal, misses = 0, 0.0, []
    for task in labelled:
        ranked = rankings[task.id]
        ranks = [ranked.index(name) + 1 for name in task.expected if name in ranked]
        first = min(ranks) if ranks else None
        if first is not None and first <= 5:
            hits += 1
        else:
            misses.append(task.id)
        reciprocal += 1.0 / first if first else 0.0
    count = len(labelled)
    return Scores(tasks=count, recall_at_5=hits / count, mrr=reciprocal / count, misses=misses)
