"""Plain-text reports of an import for the command line: the plan, the problems, the result."""

from __future__ import annotations

from registry.servers.importing.entries import ImportFileError
from registry.servers.importing.planning import ImportAction, ImportPlan

_MARKS = {ImportAction.CREATE: "+", ImportAction.UPDATE: "~", ImportAction.UNCHANGED: "="}


def plan_lines(plan: ImportPlan) -> list[str]:
    """The plan, one line per server, its field changes and warnings indented under it.

    Values of env and headers are masked: the plan is safe to paste into a ticket.
    """
    source = f"{plan.filename} " if plan.filename else ""
    lines = [f"Import plan for {source}({plan.format_label}):"]
    lines += [f"  ! {warning}" for warning in plan.warnings]
    if local := plan.local_processes_vouched:
        lines.append(
            f"  ! Builtin for every entry: {len(local)} server(s) would run as a local process, "
            f"unsandboxed on the workers' host ({', '.join(entry.slug for entry in local)}); "
            "a poisoned one among them would run with the host's access."
        )
    for category in plan.categories:
        if category.action != ImportAction.UNCHANGED:
            lines.append(
                f"  {_MARKS[category.action]} category {category.slug} ({category.name}): "
                f"{category.action.value}"
            )
    for entry in plan.entries:
        lines.append(f"  {_MARKS[entry.action]} {entry.slug} ({entry.name}): {entry.action_text}")
        for change in entry.changes:
            if entry.action == ImportAction.CREATE:
                lines.append(f"      {change.field}: {change.new}")
            else:
                lines.append(f"      {change.field}: {change.old} -> {change.new}")
        lines += [f"      ! {warning}" for warning in entry.warnings]
    lines.append(plan.summary())
    return lines


def problem_lines(error: ImportFileError) -> list[str]:
    return [error.message, *(f"  - {problem}" for problem in error.problems)]
