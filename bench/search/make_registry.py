"""Generates tests/data/search/registry.json: 1,000 tools on 50 made-up but realistic servers.

Each server is a product an engineering team would plug into its agents (issue trackers, clouds,
databases, chat, billing...), with five kinds of object and four operations on each, so tools of
different servers share verbs and nouns the way real registries do (many servers can `list` or
`search` something). Names and descriptions are all distinct. The output is committed; run this
again only to change the set (then rewrite the tasks that depend on it, before any tuning).

    .venv/bin/python bench/search/make_registry.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "search" / "registry.json"

# slug: (name, category, what it is, {object: (plural, parent, detail)}), five objects each.
SERVICES: dict[str, tuple[str, str, str, dict[str, tuple[str, str, str]]]] = {
    "jira": (
        "Jira",
        "project-management",
        "issue tracking",
        {
            "issue": ("issues", "project", "summary, status, assignee and priority"),
            "sprint": ("sprints", "board", "goal, start and end dates"),
            "comment": ("comments", "issue", "author and body in Atlassian markup"),
            "worklog": ("worklogs", "issue", "time spent and who logged it"),
            "epic": ("epics", "project", "child issues and progress"),
        },
    ),
    "linear": (
        "Linear",
        "project-management",
        "product development tracking",
        {
            "ticket": ("tickets", "team", "title, state, estimate and labels"),
            "cycle": ("cycles", "team", "scope, completed points and dates"),
            "roadmap": ("roadmaps", "workspace", "projects and target dates"),
            "label": ("labels", "team", "name and colour"),
            "triage_item": ("triage items", "team", "reporter and suggested assignee"),
        },
    ),
    "github": (
        "GitHub",
        "developer-tools",
        "code hosting",
        {
            "pull_request": (
                "pull requests",
                "repository",
                "title, head and base branches, reviewers",
            ),
            "workflow_run": (
                "workflow runs",
                "repository",
                "conclusion, duration and triggering event",
            ),
            "release": ("releases", "repository", "tag, notes and assets"),
            "code_scanning_alert": (
                "code scanning alerts",
                "repository",
                "rule, severity and file",
            ),
            "gist": ("gists", "user", "files and visibility"),
        },
    ),
    "gitlab": (
        "GitLab",
        "developer-tools",
        "DevOps platform",
        {
            "merge_request": ("merge requests", "project", "source branch, approvals and pipeline"),
            "pipeline": ("pipelines", "project", "stages, jobs and status"),
            "runner": ("runners", "group", "tags, executor and online state"),
            "snippet": ("snippets", "project", "title and file content"),
            "environment": ("environments", "project", "last deployment and URL"),
        },
    ),
    "slack": (
        "Slack",
        "communication",
        "team chat",
        {
            "message": ("messages", "channel", "text, author and thread"),
            "channel": ("channels", "workspace", "topic, purpose and members"),
            "reaction": ("reactions", "message", "emoji and who reacted"),
            "reminder": ("reminders", "user", "text and due time"),
            "user_group": ("user groups", "workspace", "handle and members"),
        },
    ),
    "gmail": (
        "Gmail",
        "communication",
        "email",
        {
            "email": ("emails", "mailbox", "sender, subject and snippet"),
            "draft": ("drafts", "mailbox", "recipients and body"),
            "mail_label": ("mail labels", "mailbox", "name and message counts"),
            "filter_rule": ("filter rules", "mailbox", "criteria and action"),
            "attachment": ("attachments", "email", "filename, size and MIME type"),
        },
    ),
    "gcal": (
        "Google Calendar",
        "productivity",
        "calendars and scheduling",
        {
            "event": ("events", "calendar", "start, end, location and attendees"),
            "calendar": ("calendars", "account", "time zone and access role"),
            "free_busy_slot": ("free/busy slots", "calendar", "busy intervals"),
            "event_invitation": ("event invitations", "event", "response status"),
            "recurring_series": ("recurring series", "calendar", "recurrence rule"),
        },
    ),
    "notion": (
        "Notion",
        "productivity",
        "notes and wikis",
        {
            "page": ("pages", "workspace", "title, properties and blocks"),
            "database_row": ("database rows", "Notion database", "property values"),
            "block": ("blocks", "page", "type and rich text"),
            "notion_comment": ("page comments", "page", "discussion and author"),
            "template": ("templates", "Notion database", "default properties"),
        },
    ),
    "confluence": (
        "Confluence",
        "productivity",
        "team documentation",
        {
            "wiki_page": ("wiki pages", "space", "title, version and body"),
            "space": ("spaces", "site", "key, name and permissions"),
            "page_attachment": ("page attachments", "wiki page", "file name and version"),
            "inline_comment": ("inline comments", "wiki page", "highlighted text and reply"),
            "page_label": ("page labels", "wiki page", "prefix and name"),
        },
    ),
    "gdrive": (
        "Google Drive",
        "storage",
        "file storage and sharing",
        {
            "drive_file": ("Drive files", "folder", "name, owner and MIME type"),
            "shared_drive": ("shared drives", "organisation", "members and restrictions"),
            "permission": ("sharing permissions", "Drive file", "role and grantee"),
            "revision": ("file revisions", "Drive file", "modified time and author"),
            "drive_folder": ("folders", "shared drive", "parent and children"),
        },
    ),
    "s3": (
        "Amazon S3",
        "cloud",
        "object storage",
        {
            "bucket": ("buckets", "AWS account", "region, versioning and encryption"),
            "object": ("objects", "bucket", "key, size, storage class and ETag"),
            "lifecycle_rule": ("lifecycle rules", "bucket", "transitions and expiration"),
            "presigned_url": ("presigned URLs", "object", "expiry and HTTP method"),
            "bucket_policy": ("bucket policies", "bucket", "statements and principals"),
        },
    ),
    "ec2": (
        "Amazon EC2",
        "cloud",
        "virtual machines",
        {
            "instance": ("instances", "region", "type, state, AMI and IP addresses"),
            "security_group": ("security groups", "VPC", "ingress and egress rules"),
            "volume": ("EBS volumes", "availability zone", "size, IOPS and attachment"),
            "snapshot": ("EBS snapshots", "volume", "progress and encryption"),
            "key_pair": ("SSH key pairs", "region", "fingerprint"),
        },
    ),
    "lambda_fn": (
        "AWS Lambda",
        "cloud",
        "serverless functions",
        {
            "function": ("functions", "region", "runtime, memory and timeout"),
            "invocation": ("invocations", "function", "payload, result and duration"),
            "alias": ("function aliases", "function", "version weights"),
            "layer": ("layers", "region", "compatible runtimes"),
            "event_source_mapping": (
                "event source mappings",
                "function",
                "queue or stream and batch size",
            ),
        },
    ),
    "gcp": (
        "Google Cloud",
        "cloud",
        "cloud projects",
        {
            "compute_vm": ("Compute Engine VMs", "GCP project", "machine type and zone"),
            "cloud_run_service": ("Cloud Run services", "GCP project", "revision, traffic and URL"),
            "iam_binding": ("IAM bindings", "GCP project", "role and members"),
            "billing_budget": ("billing budgets", "billing account", "amount and thresholds"),
            "log_entry": ("log entries", "GCP project", "severity, resource and payload"),
        },
    ),
    "azure": (
        "Microsoft Azure",
        "cloud",
        "cloud resources",
        {
            "resource_group": ("resource groups", "subscription", "location and tags"),
            "app_service": ("App Service apps", "resource group", "plan, runtime and hostnames"),
            "key_vault_secret": (
                "Key Vault secrets",
                "key vault",
                "name, version and expiry (never the value)",
            ),
            "storage_account": ("storage accounts", "resource group", "SKU and endpoints"),
            "cost_report": ("cost reports", "subscription", "spend by service"),
        },
    ),
    "kubernetes": (
        "Kubernetes",
        "infrastructure",
        "container orchestration",
        {
            "pod": ("pods", "namespace", "phase, restarts and node"),
            "deployment": ("deployments", "namespace", "replicas, image and rollout status"),
            "k8s_service": ("services", "namespace", "type, ports and selector"),
            "configmap": ("ConfigMaps", "namespace", "keys and data"),
            "k8s_event": ("cluster events", "namespace", "reason, object and count"),
        },
    ),
    "docker_hub": (
        "Docker Hub",
        "infrastructure",
        "container image registry",
        {
            "image_tag": ("image tags", "repository", "digest, size and push date"),
            "image_repository": ("image repositories", "namespace", "description and pull count"),
            "vulnerability_report": ("vulnerability reports", "image tag", "CVEs by severity"),
            "webhook": ("repository webhooks", "image repository", "target URL"),
            "access_token": ("personal access tokens", "account", "scopes and last use"),
        },
    ),
    "terraform": (
        "Terraform Cloud",
        "infrastructure",
        "infrastructure as code",
        {
            "workspace": ("workspaces", "organisation", "variables, VCS link and state"),
            "plan_run": ("runs", "workspace", "plan summary and status"),
            "state_version": ("state versions", "workspace", "serial and resources"),
            "variable_set": ("variable sets", "organisation", "variables and scope"),
            "module": ("registry modules", "organisation", "versions and inputs"),
        },
    ),
    "datadog": (
        "Datadog",
        "observability",
        "monitoring",
        {
            "monitor": ("monitors", "account", "query, thresholds and state"),
            "dashboard": ("dashboards", "account", "widgets and layout"),
            "metric_series": ("metric series", "metric", "points over a time range"),
            "incident": ("Datadog incidents", "account", "severity, commander and timeline"),
            "synthetic_test": ("synthetic tests", "account", "locations and assertions"),
        },
    ),
    "grafana": (
        "Grafana",
        "observability",
        "dashboards and alerting",
        {
            "grafana_dashboard": ("Grafana dashboards", "folder", "panels and variables"),
            "alert_rule": ("alert rules", "folder", "condition, labels and state"),
            "datasource": ("data sources", "organisation", "type and URL"),
            "annotation": ("annotations", "dashboard", "time, text and tags"),
            "silence": ("alert silences", "Alertmanager", "matchers and end time"),
        },
    ),
    "sentry": (
        "Sentry",
        "observability",
        "error tracking",
        {
            "error_issue": ("error issues", "Sentry project", "culprit, count and first seen"),
            "error_event": ("error events", "error issue", "stack trace, tags and breadcrumbs"),
            "release_health": ("release health reports", "Sentry project", "crash-free sessions"),
            "performance_transaction": (
                "performance transactions",
                "Sentry project",
                "p95 duration and throughput",
            ),
            "sentry_alert": ("Sentry alert rules", "Sentry project", "conditions and actions"),
        },
    ),
    "pagerduty": (
        "PagerDuty",
        "observability",
        "on-call and incident response",
        {
            "oncall_schedule": ("on-call schedules", "account", "layers and who is on call now"),
            "pd_incident": ("PagerDuty incidents", "service", "urgency, status and assignee"),
            "escalation_policy": ("escalation policies", "account", "rules and targets"),
            "maintenance_window": ("maintenance windows", "service", "start, end and services"),
            "pd_service": ("PagerDuty services", "account", "integrations and alert grouping"),
        },
    ),
    "postgres_admin": (
        "PostgreSQL Admin",
        "databases",
        "PostgreSQL administration",
        {
            "table": ("tables", "schema", "columns, size and row estimate"),
            "query_plan": ("query plans", "database", "EXPLAIN ANALYZE output"),
            "slow_query": (
                "slow queries",
                "database",
                "mean time and calls from pg_stat_statements",
            ),
            "db_role": ("database roles", "cluster", "attributes and memberships"),
            "replication_slot": ("replication slots", "cluster", "lag and active state"),
        },
    ),
    "mongodb": (
        "MongoDB Atlas",
        "databases",
        "document database",
        {
            "collection": ("collections", "database", "document count and indexes"),
            "document": ("documents", "collection", "matching a filter"),
            "aggregation": ("aggregation pipelines", "collection", "stages and results"),
            "atlas_cluster": ("Atlas clusters", "project", "tier, version and region"),
            "search_index": ("Atlas Search indexes", "collection", "mappings and status"),
        },
    ),
    "redis_admin": (
        "Redis Admin",
        "databases",
        "key-value store administration",
        {
            "key": ("keys", "Redis database", "type, TTL and memory usage"),
            "stream_entry": ("stream entries", "stream", "ID and fields"),
            "pubsub_channel": ("Pub/Sub channels", "Redis server", "subscriber counts"),
            "memory_report": ("memory reports", "Redis server", "fragmentation and biggest keys"),
            "slowlog_entry": ("slowlog entries", "Redis server", "command and duration"),
        },
    ),
    "snowflake": (
        "Snowflake",
        "data",
        "cloud data warehouse",
        {
            "warehouse": ("virtual warehouses", "account", "size, state and credits used"),
            "sf_table": ("warehouse tables", "schema", "clustering and row count"),
            "query_history": (
                "query history records",
                "warehouse",
                "SQL text, bytes scanned and time",
            ),
            "stage": ("stages", "schema", "location and file format"),
            "share": ("data shares", "account", "consumers and objects"),
        },
    ),
    "bigquery": (
        "BigQuery",
        "data",
        "serverless analytics",
        {
            "dataset": ("datasets", "GCP project", "location and default expiration"),
            "bq_table": ("BigQuery tables", "dataset", "schema, partitioning and size"),
            "bq_job": ("query jobs", "GCP project", "bytes billed and state"),
            "scheduled_query": ("scheduled queries", "dataset", "schedule and destination"),
            "routine": ("routines", "dataset", "UDF or stored procedure body"),
        },
    ),
    "dbt": (
        "dbt Cloud",
        "data",
        "data transformation",
        {
            "dbt_model": ("dbt models", "dbt project", "materialization and lineage"),
            "dbt_run": ("dbt runs", "dbt job", "status, steps and duration"),
            "dbt_test": ("dbt tests", "dbt model", "results and failures"),
            "dbt_source": ("dbt sources", "dbt project", "freshness and tables"),
            "dbt_job": ("dbt jobs", "dbt project", "commands and schedule"),
        },
    ),
    "airflow": (
        "Apache Airflow",
        "data",
        "workflow orchestration",
        {
            "dag": ("DAGs", "Airflow instance", "schedule, owner and paused state"),
            "dag_run": ("DAG runs", "DAG", "state, logical date and duration"),
            "task_instance": ("task instances", "DAG run", "state, try number and log"),
            "airflow_variable": ("Airflow variables", "Airflow instance", "key and value"),
            "airflow_connection": ("Airflow connections", "Airflow instance", "type and host"),
        },
    ),
    "stripe": (
        "Stripe",
        "finance",
        "payments",
        {
            "payment_intent": ("payment intents", "Stripe account", "amount, currency and status"),
            "customer": (
                "customers",
                "Stripe account",
                "email, default payment method and balance",
            ),
            "subscription": ("subscriptions", "customer", "plan, status and renewal date"),
            "refund": ("refunds", "charge", "amount and reason"),
            "invoice": ("invoices", "customer", "line items, total and due date"),
        },
    ),
    "quickbooks": (
        "QuickBooks",
        "finance",
        "accounting",
        {
            "bill": ("bills", "vendor", "amount due and due date"),
            "ledger_account": ("ledger accounts", "company", "type and balance"),
            "journal_entry": ("journal entries", "company", "debits and credits"),
            "vendor": ("vendors", "company", "contact and balance"),
            "profit_loss_report": (
                "profit and loss reports",
                "company",
                "income and expenses by period",
            ),
        },
    ),
    "salesforce": (
        "Salesforce",
        "crm",
        "customer relationship management",
        {
            "lead": ("leads", "org", "company, source and status"),
            "opportunity": ("opportunities", "account", "stage, amount and close date"),
            "sf_account": ("accounts", "org", "industry, owner and annual revenue"),
            "contact": ("contacts", "account", "name, email and title"),
            "sf_report": ("Salesforce reports", "org", "filters and grouped rows"),
        },
    ),
    "hubspot": (
        "HubSpot",
        "crm",
        "marketing and sales",
        {
            "deal": ("deals", "pipeline", "stage and amount"),
            "marketing_email": ("marketing emails", "portal", "subject, open rate and clicks"),
            "form_submission": ("form submissions", "form", "fields and contact"),
            "company_record": ("company records", "portal", "domain and lifecycle stage"),
            "sequence": ("sales sequences", "portal", "steps and enrolments"),
        },
    ),
    "zendesk": (
        "Zendesk",
        "support",
        "customer support",
        {
            "support_ticket": ("support tickets", "help desk", "requester, status and priority"),
            "macro": ("macros", "help desk", "actions and usage"),
            "satisfaction_rating": ("satisfaction ratings", "support ticket", "score and comment"),
            "help_center_article": ("help center articles", "section", "title, body and votes"),
            "agent_group": ("agent groups", "help desk", "agents and default assignee"),
        },
    ),
    "intercom": (
        "Intercom",
        "support",
        "customer messaging",
        {
            "conversation": ("conversations", "inbox", "customer, state and last reply"),
            "intercom_contact": (
                "Intercom contacts",
                "workspace",
                "email, segments and attributes",
            ),
            "note": ("conversation notes", "conversation", "internal text"),
            "segment": ("segments", "workspace", "filter and member count"),
            "product_tour": ("product tours", "workspace", "steps and completion rate"),
        },
    ),
    "figma": (
        "Figma",
        "design",
        "interface design",
        {
            "figma_file": ("Figma files", "project", "pages, frames and last edit"),
            "component": ("components", "library", "name, description and variants"),
            "design_comment": ("design comments", "Figma file", "pinned position and thread"),
            "frame_export": ("frame exports", "Figma file", "PNG or SVG rendering"),
            "style": ("styles", "library", "colours, text and effects"),
        },
    ),
    "shopify": (
        "Shopify",
        "commerce",
        "online store",
        {
            "product": ("products", "store", "title, variants, price and inventory"),
            "order": ("orders", "store", "line items, fulfilment and payment status"),
            "discount_code": ("discount codes", "price rule", "code and usage count"),
            "inventory_level": ("inventory levels", "location", "available quantity"),
            "shop_customer": ("store customers", "store", "orders count and total spent"),
        },
    ),
    "twilio": (
        "Twilio",
        "communication",
        "SMS and voice",
        {
            "sms": ("SMS messages", "phone number", "body, status and price"),
            "call": ("voice calls", "account", "from, to, duration and recording"),
            "phone_number": ("phone numbers", "account", "capabilities and webhooks"),
            "verification": ("verifications", "verify service", "channel and status"),
            "call_recording": ("call recordings", "call", "duration and transcript"),
        },
    ),
    "okta": (
        "Okta",
        "security",
        "identity and access",
        {
            "okta_user": ("Okta users", "org", "status, profile and factors"),
            "okta_group": ("Okta groups", "org", "members and assigned apps"),
            "app_assignment": ("app assignments", "application", "user and profile"),
            "system_log_event": ("system log events", "org", "actor, outcome and target"),
            "mfa_factor": ("MFA factors", "Okta user", "type and enrolment state"),
        },
    ),
    "vault": (
        "HashiCorp Vault",
        "security",
        "secrets management",
        {
            "secret_metadata": (
                "secret metadata entries",
                "KV mount",
                "versions and custom metadata (never values)",
            ),
            "lease": ("leases", "Vault cluster", "TTL and renewability"),
            "vault_policy": ("Vault policies", "Vault cluster", "paths and capabilities"),
            "auth_method": ("auth methods", "Vault cluster", "type and mount path"),
            "audit_device": ("audit devices", "Vault cluster", "type and options"),
        },
    ),
    "snyk": (
        "Snyk",
        "security",
        "dependency security",
        {
            "vulnerability": (
                "vulnerabilities",
                "Snyk project",
                "package, CVSS score and fix version",
            ),
            "snyk_project": ("Snyk projects", "organisation", "manifest and last test"),
            "license_issue": ("license issues", "Snyk project", "license and severity"),
            "fix_pr": ("fix pull requests", "Snyk project", "upgrades it proposes"),
            "ignore_rule": ("ignore rules", "Snyk project", "reason and expiry"),
        },
    ),
    "cloudflare": (
        "Cloudflare",
        "networking",
        "CDN and DNS",
        {
            "dns_record": ("DNS records", "zone", "type, name, content and TTL"),
            "zone": ("zones", "account", "plan and name servers"),
            "firewall_rule": ("WAF firewall rules", "zone", "expression and action"),
            "cache_purge": ("cache purges", "zone", "URLs or tags purged"),
            "worker_script": ("Workers scripts", "account", "routes and bindings"),
        },
    ),
    "vercel": (
        "Vercel",
        "developer-tools",
        "frontend hosting",
        {
            "vercel_deployment": ("Vercel deployments", "Vercel project", "URL, state and commit"),
            "domain": ("domains", "Vercel project", "verification and redirects"),
            "env_var": (
                "environment variables",
                "Vercel project",
                "target environments (never values)",
            ),
            "build_log": ("build logs", "Vercel deployment", "lines and timings"),
            "edge_config": ("edge configs", "team", "items and digest"),
        },
    ),
    "npm_registry": (
        "npm Registry",
        "developer-tools",
        "JavaScript package registry",
        {
            "package": ("npm packages", "registry", "versions, maintainers and downloads"),
            "dist_tag": ("dist-tags", "npm package", "tag and version"),
            "npm_advisory": ("security advisories", "npm package", "affected versions"),
            "npm_token": ("npm tokens", "account", "type and CIDR whitelist"),
            "download_stat": ("download statistics", "npm package", "daily downloads"),
        },
    ),
    "openai_admin": (
        "OpenAI Platform",
        "ai",
        "language model platform",
        {
            "fine_tune_job": ("fine-tuning jobs", "organisation", "base model, status and metrics"),
            "vector_store": ("vector stores", "organisation", "files and usage bytes"),
            "batch": ("batch jobs", "organisation", "request counts and status"),
            "usage_record": ("usage records", "organisation", "tokens and cost by model"),
            "assistant": ("assistants", "organisation", "model, instructions and tools"),
        },
    ),
    "huggingface": (
        "Hugging Face Hub",
        "ai",
        "models and datasets hub",
        {
            "model_repo": ("model repositories", "namespace", "tags, downloads and license"),
            "dataset_repo": ("dataset repositories", "namespace", "splits and size"),
            "space_app": ("Spaces", "namespace", "SDK, hardware and runtime status"),
            "inference_endpoint": ("inference endpoints", "namespace", "instance type and state"),
            "model_card": ("model cards", "model repository", "metadata and text"),
        },
    ),
    "google_maps": (
        "Google Maps",
        "location",
        "maps and places",
        {
            "place": ("places", "area", "name, address, rating and opening hours"),
            "route": ("routes", "trip", "distance, duration and steps"),
            "geocode": ("geocoding results", "address", "latitude and longitude"),
            "distance_matrix": ("distance matrices", "origins and destinations", "travel times"),
            "elevation": ("elevation samples", "path", "metres above sea level"),
        },
    ),
    "weather": (
        "OpenWeather",
        "location",
        "weather data",
        {
            "forecast": ("forecasts", "city", "temperature, precipitation and wind by hour"),
            "weather_alert": ("severe weather alerts", "region", "event, sender and validity"),
            "air_quality": ("air quality readings", "location", "AQI and pollutants"),
            "historical_weather": ("historical weather records", "location", "daily observations"),
            "uv_index": ("UV index readings", "location", "index and risk"),
        },
    ),
    "workday": (
        "Workday",
        "hr",
        "human resources",
        {
            "employee": ("employees", "organisation", "job title, manager and location"),
            "time_off_request": ("time-off requests", "employee", "dates, type and approval"),
            "job_requisition": (
                "job requisitions",
                "organisation",
                "position, hiring manager and status",
            ),
            "payslip": ("payslips", "employee", "gross, deductions and net pay"),
            "org_chart": ("org charts", "organisation", "reporting lines"),
        },
    ),
    "greenhouse": (
        "Greenhouse",
        "hr",
        "recruiting",
        {
            "candidate": ("candidates", "job", "stage, source and resume"),
            "interview": ("interviews", "candidate", "interviewers, time and scorecard"),
            "scorecard": ("scorecards", "interview", "ratings and recommendation"),
            "job_post": ("job posts", "job", "title, location and board"),
            "offer": ("offers", "candidate", "salary, start date and status"),
        },
    ),
}

# verb: (name prefix, description template, extra parameters)
VERBS: dict[str, tuple[str, str]] = {
    "list": (
        "list_{plural_id}",
        "List the {plural} of a {parent} in {product}, with their {detail}; paged, newest first.",
    ),
    "get": ("get_{object}", "Get one {object_words} from {product} by its ID, with its {detail}."),
    "create": (
        "create_{object}",
        (
            "Create a new {object_words} in a {parent} on {product} ({what}); "
            "returns it with its {detail}."
        ),
    ),
    "update": (
        "update_{object}",
        "Change an existing {object_words} in {product}: any of its {detail}.",
    ),
    "delete": (
        "delete_{object}",
        "Delete a {object_words} from {product} for good; it cannot be restored.",
    ),
    "search": (
        "search_{plural_id}",
        "Search {product}'s {plural} by keyword and filters on their {detail}.",
    ),
    "export": (
        "export_{plural_id}",
        "Export the {plural} of a {parent} from {product} as CSV or JSON, including {detail}.",
    ),
    "summarize": (
        "summarize_{plural_id}",
        (
            "Summarise recent {plural} of a {parent} in {product}: "
            "counts and trends of their {detail}."
        ),
    ),
}
# Which four verbs each object gets, by its position in the server (varied, not all alike).
VERB_SETS = (
    ("list", "get", "create", "update"),
    ("search", "get", "delete", "export"),
    ("list", "create", "update", "summarize"),
    ("get", "search", "update", "delete"),
    ("list", "get", "export", "summarize"),
)
READ_VERBS = {"list", "get", "search", "export", "summarize"}


def _words(identifier: str) -> str:
    return identifier.replace("_", " ")


def _plural_id(plural: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in plural.lower()).strip("_").replace("__", "_")


def _schema(verb: str, object_id: str, parent: str) -> dict[str, Any]:
    parent_id = _plural_id(parent) + "_id"
    properties: dict[str, Any] = {}
    required: list[str] = []
    if verb in ("list", "search", "export", "summarize", "create"):
        properties[parent_id] = {"type": "string", "description": f"ID of the {parent}."}
        required.append(parent_id)
    if verb in ("get", "update", "delete"):
        properties[f"{object_id}_id"] = {
            "type": "string",
            "description": f"ID of the {_words(object_id)}.",
        }
        required.append(f"{object_id}_id")
    if verb == "search":
        properties["query"] = {"type": "string", "description": "Keywords to match."}
    if verb in ("list", "search"):
        properties["limit"] = {"type": "integer", "description": "At most this many results."}
    if verb == "export":
        properties["format"] = {"type": "string", "enum": ["csv", "json"]}
    if verb == "summarize":
        properties["days"] = {"type": "integer", "description": "How many days back to look."}
    if verb in ("create", "update"):
        properties["fields"] = {"type": "object", "description": "The values to set."}
    return {"type": "object", "properties": properties, "required": required}


def build() -> dict[str, Any]:
    servers = []
    names: set[str] = set()
    descriptions: set[str] = set()
    for slug, (product, category, what, objects) in SERVICES.items():
        tools = []
        for position, (object_id, (plural, parent, detail)) in enumerate(objects.items()):
            for verb in VERB_SETS[position]:
                name_template, description_template = VERBS[verb]
                values = {
                    "object": object_id,
                    "object_words": _words(object_id),
                    "plural": plural,
                    "plural_id": _plural_id(plural),
                    "parent": parent,
                    "detail": detail,
                    "product": product,
                    "what": what,
                }
                name = name_template.format(**values)
                description = description_template.format(**values)
                key = f"{slug}__{name}"
                assert key not in names, key
                assert description not in descriptions, description
                names.add(key)
                descriptions.add(description)
                tools.append(
                    {
                        "name": name,
                        "description": description,
                        "inputSchema": _schema(verb, object_id, parent),
                        "annotations": {"readOnlyHint": verb in READ_VERBS},
                    }
                )
        servers.append(
            {
                "slug": slug,
                "name": product,
                "category": category,
                "description": f"{product}: {what}.",
                "tools": tools,
            }
        )
    total = sum(len(server["tools"]) for server in servers)
    assert total == 1000, total
    return {"generated_by": "bench/search/make_registry.py", "servers": servers}


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(build(), indent=1) + "\n")
    print(f"wrote {OUT}")
