"""`manage.py mcp`: discover, check, start and stop servers, approve, suspend and resume them,
approve or revoke their tools, and print where to link an account at a per-person server, from a
shell.

Every subcommand goes through the same services as the admin. Discovery is done by the workers
(the command waits for them and shows progress) unless --inline asks for it to run right here.
"""

from __future__ import annotations

import getpass
import time
from typing import Any

import anyio
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.db.models import QuerySet
from django.urls import reverse

from registry.core.errors import ApplicationError
from registry.servers import services
from registry.servers.jobs.discovery import (
    discovery_claim,
    discovery_record,
    discovery_request,
    discovery_runs_needing_attention,
)
from registry.servers.jobs.health import health_record
from registry.servers.jobs.launch import server_launch_plan
from registry.servers.jobs.runtime import runtime_display_state, runtime_request
from registry.servers.models import (
    ApprovalState,
    DiscoveryRun,
    McpServer,
    ReviewStatus,
    Tool,
    UpstreamAuth,
)
from registry.servers.selectors import server_list_with_tool_counts
from workers.discovery import discover_server, discovery_lease_kept
from workers.health import check_plans, health_check_refused_again, health_plans

POLL_SECONDS = 0.5


def _actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


class Command(BaseCommand):
    help = (
        "Discover, health-check, start/stop, approve, suspend and resume MCP servers; approve "
        "and revoke tools."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

        discover = sub.add_parser("discover", help="List a server's tools, resources, prompts.")
        discover.add_argument("slugs", nargs="*", metavar="SLUG")
        discover.add_argument("--all", action="store_true", help="every server not retired")
        discover.add_argument(
            "--async", dest="no_wait", action="store_true", help="only ask the workers; do not wait"
        )
        discover.add_argument(
            "--inline", action="store_true", help="discover in this process instead of the workers"
        )
        discover.add_argument(
            "--timeout",
            type=float,
            default=180.0,
            help="seconds to wait for the workers (default 180)",
        )

        check = sub.add_parser("check", help="Check servers' health now, in this process.")
        check.add_argument("slugs", nargs="*", metavar="SLUG")
        check.add_argument("--all", action="store_true")

        sub.add_parser("status", help="The fleet as a table.")

        for name in ("start", "stop", "restart"):
            runtime = sub.add_parser(name, help=f"{name.capitalize()} a server's warm runtime.")
            runtime.add_argument("slug", metavar="SLUG")

        approve = sub.add_parser("approve", help="Approve a server (submitting it if needed).")
        approve.add_argument("slug", metavar="SLUG")
        approve.add_argument("--note", default="", help="what was reviewed")

        tools = sub.add_parser("approve-tools", help="Approve tools at their current hashes.")
        tools.add_argument("slug", metavar="SLUG")
        tools.add_argument("--tool", action="append", default=[], metavar="NAME")
        tools.add_argument("--all", action="store_true", help="every tool not yet approved")
        tools.add_argument(
            "--acknowledge-findings",
            action="store_true",
            help="also approve tools the scanner flagged (you read the findings)",
        )
        tools.add_argument("--note", default="")

        items = sub.add_parser(
            "review-items", help="Approve or hide resources and prompts (at current hashes)."
        )
        items.add_argument("slug", metavar="SLUG")
        items.add_argument("decision", choices=services.ITEM_ACTIONS)
        items.add_argument("--resource", action="append", default=[], metavar="URI")
        items.add_argument("--prompt", action="append", default=[], metavar="NAME")
        items.add_argument("--all", action="store_true", help="every resource and prompt")
        items.add_argument("--note", default="", help="a note, or why hidden (audited)")

        revoke = sub.add_parser("revoke-tools", help="Revoke the approval of tools.")
        revoke.add_argument("slug", metavar="SLUG")
        revoke.add_argument("--tool", action="append", default=[], metavar="NAME")
        revoke.add_argument("--all", action="store_true", help="every approved tool")
        revoke.add_argument("--reason", required=True, help="why (kept in the audit trail)")

        suspend = sub.add_parser("suspend", help="Suspend an approved server.")
        suspend.add_argument("slug", metavar="SLUG")
        suspend.add_argument("--reason", required=True, help="why (kept in the audit trail)")

        link = sub.add_parser(
            "link",
            help="Print the URL where a person links their own account at a per-person server "
            "(an admin's link also discovers its tools).",
        )
        link.add_argument("slug", metavar="SLUG")
        link.add_argument("--user", default="", metavar="NAME", help="who opens the URL")
        link.add_argument(
            "--no-discovery",
            action="store_true",
            help="an admin's own link only, not the one that discovers the server's tools",
        )

        resume = sub.add_parser("resume", help="Approve a suspended server again.")
        resume.add_argument("slug", metavar="SLUG")
        resume.add_argument("--note", default="", help="what was reviewed")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"].replace("-", "_")
        try:
            getattr(self, f"_{action}")(options)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc

    # --- helpers -----------------------------------------------------------------------------

    def _server(self, slug: str) -> McpServer:
        server = McpServer.objects.filter(slug=slug).first()
        if server is None:
            raise CommandError(f"No server with the slug {slug!r} (see `manage.py mcp status`).")
        return server

    def _servers(self, options: dict[str, Any]) -> QuerySet[McpServer]:
        if options.get("all"):
            if options["slugs"]:
                raise CommandError("Give server slugs or --all, not both.")
            return McpServer.objects.exclude(review_status=ReviewStatus.RETIRED).order_by("slug")
        if not options["slugs"]:
            raise CommandError("Name at least one server slug, or --all.")
        for slug in options["slugs"]:
            self._server(slug)
        return McpServer.objects.filter(slug__in=options["slugs"]).order_by("slug")

    # --- discover ------------------------------------------------------------------------------

    def _discover(self, options: dict[str, Any]) -> None:
        servers = list(self._servers(options))
        if options["inline"]:
            self._discover_inline(servers)
            return
        runs = [
            discovery_request(server=server, actor=_actor(), trigger="command")
            for server in servers
        ]
        if options["no_wait"]:
            for run in runs:
                self.stdout.write(f"queued discovery #{run.pk} of {run.server.slug}")
            return
        self._wait_for(runs, timeout=options["timeout"])

    def _wait_for(self, runs: list[DiscoveryRun], *, timeout: float) -> None:
        pending = {run.pk for run in runs}
        total = len(runs)
        failed = 0
        deadline = time.monotonic() + timeout
        started_any = False
        while pending and time.monotonic() < deadline:
            for run in DiscoveryRun.objects.filter(pk__in=pending).select_related("server"):
                started_any = started_any or run.status != "queued"
                if not run.is_finished:
                    continue
                pending.discard(run.pk)
                failed += run.status == "failed"
                done = total - len(pending)
                self._report_run(run, prefix=f"[{done}/{total}] " if total > 1 else "")
            if pending:
                time.sleep(POLL_SECONDS)
        if pending:
            hint = (
                ""
                if started_any
                else " No worker has picked the work up: is a worker running? (`make run` starts "
                "one), or discover in this process with --inline."
            )
            raise CommandError(
                f"{len(pending)} discovery run(s) not finished after {timeout:g} s.{hint}"
            )
        if total > 1:
            self.stdout.write(f"{total - failed} discovered, {failed} failed.")
        if failed:
            raise CommandError(f"{failed} discovery run(s) failed.")

    def _discover_inline(self, servers: list[McpServer]) -> None:
        failed = 0
        for index, server in enumerate(servers, start=1):
            run = discovery_request(server=server, actor=_actor(), trigger="command (inline)")
            claimed = discovery_claim(run_id=run.pk)
            if claimed is None:
                self.stdout.write(f"{server.slug}: a worker is already discovering it")
                continue
            with discovery_lease_kept(claimed.pk):
                outcome = discover_server(server_launch_plan(server=server))
            finished = discovery_record(run=claimed, outcome=outcome, actor=_actor())
            failed += finished.status == "failed"
            prefix = f"[{index}/{len(servers)}] " if len(servers) > 1 else ""
            self._report_run(finished, prefix=prefix)
        if failed:
            raise CommandError(f"{failed} discovery run(s) failed.")

    def _report_run(self, run: DiscoveryRun, *, prefix: str = "") -> None:
        report = run.summary or {}
        slug = run.server.slug
        if run.status == "failed":
            self.stdout.write(self.style.ERROR(f"{prefix}{slug}: failed: {run.error}"))
            return
        counts = report.get("counts", {})
        changes = report.get("changes", {})
        info = report.get("server_info", {})
        findings = report.get("findings", {})
        timings = report.get("timings_ms", {})
        self.stdout.write(
            self.style.SUCCESS(
                f"{prefix}{slug}: {counts.get('tools', 0)} tools, {counts.get('resources', 0)} "
                f"resources, {counts.get('prompts', 0)} prompts in "
                f"{timings.get('total', 0):.0f} ms via {report.get('via', '?')}"
            )
        )
        self.stdout.write(
            f"    server {info.get('name', '?')} {info.get('version', '')}, protocol "
            f"{report.get('protocol_version', '?')}"
        )
        for key in ("added", "changed", "removed", "returned", "approvals_dropped"):
            if changes.get(key):
                names = ", ".join(changes[key][:10]) + (" ..." if len(changes[key]) > 10 else "")
                self.stdout.write(f"    {key.replace('_', ' ')}: {names}")
        if findings.get("tools_flagged_count"):
            kinds = ", ".join(f"{k} x{n}" for k, n in sorted(findings.get("by_kind", {}).items()))
            self.stdout.write(
                self.style.WARNING(
                    f"    scanner flagged {findings['tools_flagged_count']} tool(s): {kinds}"
                )
            )

    # --- check, status -----------------------------------------------------------------------

    def _check(self, options: dict[str, Any]) -> None:
        plans = health_plans(self._servers(options))
        results = anyio.run(lambda: check_plans(plans, concurrency=20))
        results = health_check_refused_again(plans, results)
        health_record(results=results)
        names = {plan.server_id: plan.slug for plan in plans}
        for result in sorted(results, key=lambda r: names[r.server_id]):
            line = f"{names[result.server_id]}: {'ok' if result.ok else 'FAILED'}"
            if result.latency_ms is not None:
                line += f" in {result.latency_ms:.0f} ms"
            if result.error:
                line += f": {result.error.splitlines()[0]}"
            self.stdout.write(self.style.SUCCESS(line) if result.ok else self.style.ERROR(line))
        if not all(result.ok for result in results):
            raise CommandError("Some health checks failed.")

    def _status(self, options: dict[str, Any]) -> None:
        rows = [
            ("SERVER", "REVIEW", "HEALTH", "TOOLS", "LAST CHECK", "LATENCY", "RUNTIME", "ERROR")
        ]
        for server in server_list_with_tool_counts().order_by("slug"):
            status = getattr(server, "status", None)
            last = (
                status.last_checked_at.strftime("%Y-%m-%d %H:%M:%S")
                if (status and status.last_checked_at)
                else "never"
            )
            latency = f"{status.latency_ms:.0f} ms" if status and status.latency_ms else "-"
            error = ""
            if status:
                error = status.last_error or status.runtime_error or status.last_discovery_error
            rows.append(
                (
                    server.slug,
                    server.review_status,
                    status.health if status else "unknown",
                    f"{server.tools_approved}/{server.tools_total}",
                    last,
                    latency,
                    runtime_display_state(status),
                    error.splitlines()[0][:60] if error else "",
                )
            )
        widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            self.stdout.write(
                "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
            )
        self.stdout.write("TOOLS is approved/total.")
        attention = discovery_runs_needing_attention()
        if attention:
            self.stdout.write("")
            self.stdout.write("DISCOVERY RUNS STUCK OR RETRIED (last 24 h):")
            for item in attention:
                line = f"{item.run.server.slug} run {item.run.pk}: {item.describe()}"
                self.stdout.write(
                    self.style.ERROR(line) if item.stuck else self.style.WARNING(line)
                )

    # --- runtimes --------------------------------------------------------------------------

    def _runtime(self, slug: str, action: str) -> None:
        runtime_request(server=self._server(slug), action=action, actor=_actor())  # type: ignore[arg-type]
        self.stdout.write(f"Asked the workers to {action} {slug}.")

    def _start(self, options: dict[str, Any]) -> None:
        self._runtime(options["slug"], "start")

    def _stop(self, options: dict[str, Any]) -> None:
        self._runtime(options["slug"], "stop")

    def _restart(self, options: dict[str, Any]) -> None:
        self._runtime(options["slug"], "restart")

    # --- linking an upstream account ---------------------------------------------------------

    def _link(self, options: dict[str, Any]) -> None:
        server = self._server(options["slug"])
        if server.upstream_auth != UpstreamAuth.PERSON_OAUTH:
            raise CommandError(
                f"{server.slug} does not sign each person in (its upstream authentication is "
                f"{server.get_upstream_auth_display()!r})."
            )
        person = None
        if options["user"]:
            person = get_user_model().objects.filter(username=options["user"]).first()
            if person is None:
                raise CommandError(f"No user named {options['user']!r}.")
        staff = person is None or person.is_staff
        discovery = staff and not options["no_discovery"]
        url = settings.TOOLROOM_PUBLIC_URL.rstrip("/") + reverse(
            "portal:upstream-link", args=[server.slug]
        )
        if discovery:
            url += "?discovery=1"
        who = person.get_username() if person is not None else "the admin"
        self.stdout.write(
            f"Open this URL signed in to Toolroom as {who}, then press the button and sign in "
            f"at {server.name}:"
        )
        self.stdout.write(url)
        if discovery:
            self.stdout.write(
                f"The account linked there discovers {server.slug}'s tools and checks its health "
                f"(run `manage.py mcp discover {server.slug}` once it is linked)."
            )

    # --- approvals ----------------------------------------------------------------------------

    def _approve(self, options: dict[str, Any]) -> None:
        server = services.server_submit_and_approve(
            actor=_actor(), server=self._server(options["slug"]), note=options["note"]
        )
        self.stdout.write(self.style.SUCCESS(f"{server.slug} is approved."))

    def _suspend(self, options: dict[str, Any]) -> None:
        server = services.server_suspend(
            actor=_actor(), server=self._server(options["slug"]), reason=options["reason"]
        )
        self.stdout.write(self.style.SUCCESS(f"{server.slug} is suspended."))

    def _resume(self, options: dict[str, Any]) -> None:
        server = services.server_resume(
            actor=_actor(), server=self._server(options["slug"]), note=options["note"]
        )
        self.stdout.write(self.style.SUCCESS(f"{server.slug} is approved again."))

    def _revoke_tools(self, options: dict[str, Any]) -> None:
        server = self._server(options["slug"])
        if not options["tool"] and not options["all"]:
            raise CommandError("Name tools with --tool NAME, or revoke every tool with --all.")
        tools = Tool.objects.filter(server=server).order_by("name")
        if options["tool"]:
            unknown = set(options["tool"]) - set(tools.values_list("name", flat=True))
            if unknown:
                raise CommandError(f"{server.slug} has no tool named {', '.join(sorted(unknown))}.")
            tools = tools.filter(name__in=options["tool"])
        revoked = 0
        with transaction.atomic():  # all the named tools, or none
            for tool in tools:
                if tool.approval_state != ApprovalState.APPROVED:
                    if options["tool"]:
                        self.stdout.write(f"{tool.name}: not approved, nothing to revoke")
                    continue
                services.tool_revoke(actor=_actor(), tool=tool, reason=options["reason"])
                revoked += 1
                self.stdout.write(f"{tool.name}: revoked")
        self.stdout.write(f"{revoked} tool(s) revoked.")

    def _review_items(self, options: dict[str, Any]) -> None:
        """Approve (at current hashes), hide or show again a server's resources and prompts."""
        server = self._server(options["slug"])
        named = {"resource": options["resource"], "prompt": options["prompt"]}
        if not options["all"] and not any(named.values()):
            raise CommandError("Name items with --resource URI or --prompt NAME, or use --all.")
        items: list[Any] = []
        for kind, model in services.ITEM_MODELS.items():
            key = "uri" if kind == "resource" else "name"
            rows = list(model.objects.filter(server=server).select_related("server"))
            if not options["all"]:
                found = {getattr(row, key) for row in rows}
                unknown = set(named[kind]) - found
                if unknown:
                    raise CommandError(
                        f"{server.slug} offers no {kind} {', '.join(sorted(unknown))}."
                    )
                rows = [row for row in rows if getattr(row, key) in named[kind]]
            items.extend(rows)
        result = services.items_review_bulk(
            actor=_actor(), items=items, action=options["decision"], note=options["note"]
        )
        for item in result.done:
            self.stdout.write(f"{services.item_kind(item)} {item}: {options['decision']} done")
        for item, why in result.skipped:
            self.stdout.write(f"{services.item_kind(item)} {item}: skipped, {why}")
        self.stdout.write(f"{len(result.done)} item(s) done, {len(result.skipped)} skipped.")

    def _approve_tools(self, options: dict[str, Any]) -> None:
        server = self._server(options["slug"])
        if not options["tool"] and not options["all"]:
            raise CommandError("Name tools with --tool NAME, or approve every tool with --all.")
        tools = Tool.objects.filter(server=server, removed_at__isnull=True).order_by("name")
        if options["tool"]:
            unknown = set(options["tool"]) - set(tools.values_list("name", flat=True))
            if unknown:
                raise CommandError(
                    f"{server.slug} offers no tool named {', '.join(sorted(unknown))}."
                )
            tools = tools.filter(name__in=options["tool"])
        approved = skipped = 0
        for tool in tools:
            if tool.is_approved:
                continue
            if tool.findings and not options["acknowledge_findings"]:
                self.stdout.write(
                    self.style.WARNING(
                        f"{tool.name}: not approved, the scanner flagged it ({len(tool.findings)} "
                        "finding(s)); read them and use --acknowledge-findings"
                    )
                )
                skipped += 1
                continue
            services.tool_approve(
                actor=_actor(),
                tool=tool,
                note=options["note"],
                acknowledge_findings=options["acknowledge_findings"],
            )
            approved += 1
            self.stdout.write(f"{tool.name}: approved at {tool.definition_hash[:12]}")
        self.stdout.write(f"{approved} tool(s) approved, {skipped} refused.")
        if skipped:
            raise CommandError(f"{skipped} tool(s) with scanner findings were not approved.")
