"""Importing MCP server definitions from the files people have, and exporting them again.

    plan = import_plan(content=..., filename="mcp.json", options=ImportOptions(tier="builtin"))
    result = import_apply(plan=plan, actor=request.user)

`import_plan` reads mcp.json (Claude Desktop, Claude Code, VS Code, Cursor), the official
registry's server.json, or Toolroom's own YAML; checks every entry with the model's rules and
writes nothing; `import_apply` writes the plan in one transaction through the services.
`export_servers` writes Toolroom YAML or mcp.json.
"""

from registry.servers.importing.applying import ImportResult, import_apply
from registry.servers.importing.entries import ImportFileError, ImportProblem, slug_from_name
from registry.servers.importing.exporting import EXPORT_FORMATS, export_servers
from registry.servers.importing.planning import (
    CategoryPlan,
    EntryPlan,
    FieldChange,
    ImportAction,
    ImportOptions,
    ImportPlan,
    import_plan,
)
from registry.servers.importing.reading import FORMAT_LABELS, FORMATS, read_limited

__all__ = [
    "EXPORT_FORMATS",
    "FORMATS",
    "FORMAT_LABELS",
    "CategoryPlan",
    "EntryPlan",
    "FieldChange",
    "ImportAction",
    "ImportFileError",
    "ImportOptions",
    "ImportPlan",
    "ImportProblem",
    "ImportResult",
    "export_servers",
    "import_apply",
    "import_plan",
    "read_limited",
    "slug_from_name",
]
