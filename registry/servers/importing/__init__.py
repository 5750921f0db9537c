"""Importing MCP server definitions from the files people have, and exporting them again.

More: docs/admin.md, "Module notes".
"""

from registry.servers.importing.applying import ImportResult, import_apply
from registry.servers.importing.changes import FieldChange
from registry.servers.importing.entries import ImportFileError, ImportProblem, slug_from_name
from registry.servers.importing.exporting import EXPORT_FORMATS, export_servers
from registry.servers.importing.planning import (
    CategoryPlan,
    EntryPlan,
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
