"""Use of the gateway, aggregated: the hourly rollup of call records (`CallRollup`) and the reports
the admin's usage dashboard shows (calls, errors, quota hits, p50/p95 per team, server and tool).

More: docs/operations.md, "Module notes".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from django.db import connection, transaction
from django.db.models import Count, F, Min, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDay, TruncHour, TruncMinute
from django.utils import timezone

from registry.gateway.models import (
    BUCKET_FIELDS,
    LATENCY_BUCKETS_MS,
    CallOutcome,
    CallRollup,
    CallRollupDay,
    CallRollupState,
    ToolCall,
)
from registry.gateway.quotas import QUOTA_EXCEEDED
from registry.teams.models import Team

LOOKBACK_HOURS = 2
CHUNK_HOURS = 6
TOP_ROWS = 20
Period = Literal["hour", "day", "month"]
PERIODS: dict[str, tuple[str, timedelta]] = {
    "hour": ("Last hour", timedelta(hours=1)),
    "day": ("Last 24 hours", timedelta(days=1)),
    "month": ("Last 30 days", timedelta(days=30)),
}
Source = Literal["rollup", "raw"]


def _hour_floor(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def raw_bucket_counts() -> dict[str, Any]:
    """One filtered count per latency bucket, over raw call records."""
    counts: dict[str, Any] = {}
    low: float | None = None
    for index, name in enumerate(BUCKET_FIELDS):
        high = LATENCY_BUCKETS_MS[index] if index < len(LATENCY_BUCKETS_MS) else None
        within = Q()
        if low is not None:
            within &= Q(duration_ms__gt=low)
        if high is not None:
            within &= Q(duration_ms__lte=high)
        counts[name] = Count("id", filter=within)
        low = high
    return counts


# ---- the rollup ------------------------------------------------------------------------------


def _insert_select(
    model: type[CallRollup] | type[CallRollupDay],
    rows: QuerySet[Any],
    *,
    when: str,
    when_alias: str,
    team_alias: str,
    calls_alias: str,
    ms_alias: str,
    bucket_prefix: str = "",
) -> int:
    """`INSERT INTO <model's table> ... SELECT ... FROM (<rows' grouped query>)`: the rows never
    pass through Python (the first run after an upgrade rolls up every record there is)."""
    sql, params = rows.query.sql_with_params()
    quote = connection.ops.quote_name
    columns = [
        when,
        "team_id",
        "server_slug",
        "tool_name",
        "outcome",
        "error_class",
        "calls",
        "duration_ms_sum",
        *BUCKET_FIELDS,
    ]
    sources = [
        quote(when_alias),
        quote(team_alias),
        quote("server_slug"),
        quote("tool_name"),
        quote("outcome"),
        quote("error_class"),
        quote(calls_alias),
        f"COALESCE({quote(ms_alias)}, 0)",
        *(quote(f"{bucket_prefix}{name}") for name in BUCKET_FIELDS),
    ]
    # Identifiers only, each quoted and taken from this module; the values stay parameters.
    statement = (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(map(quote, columns))}) "  # noqa: S608
        f"SELECT {', '.join(sources)} FROM ({sql}) AS grouped"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return max(int(cursor.rowcount), 0)


def _refill(start: datetime, end: datetime) -> int:
    """Replace the rollup rows of the hours in [start, end) with what the raw records say."""
    CallRollup.objects.filter(hour__gte=start, hour__lt=end).delete()
    rows = (
        ToolCall.objects.filter(started_at__gte=start, started_at__lt=end)
        .annotate(
            r_hour=TruncHour("started_at", tzinfo=UTC),
            r_team=Coalesce("team_id", 0),
        )
        .values("r_hour", "r_team", "server_slug", "tool_name", "outcome", "error_class")
        .annotate(calls=Count("id"), duration_ms_sum=Sum("duration_ms"), **raw_bucket_counts())
        .order_by()
    )
    return _insert_select(
        CallRollup,
        rows,
        when="hour",
        when_alias="r_hour",
        team_alias="r_team",
        calls_alias="calls",
        ms_alias="duration_ms_sum",
    )


def _refill_days(start: datetime, end: datetime) -> int:
    """Replace the daily rows of the days that [start, end) touches with the sums of their
    hourly rows."""
    first = _hour_floor(start).replace(hour=0)
    last = _hour_floor(end - timedelta(hours=1)).replace(hour=0) + timedelta(days=1)
    CallRollupDay.objects.filter(day__gte=first, day__lt=last).delete()
    rows = (
        CallRollup.objects.filter(hour__gte=first, hour__lt=last)
        .annotate(r_day=TruncDay("hour", tzinfo=UTC))
        .values("r_day", "team_id", "server_slug", "tool_name", "outcome", "error_class")
        .annotate(
            n_calls=Sum("calls"),
            n_ms=Sum("duration_ms_sum"),
            **{f"s_{name}": Sum(name) for name in BUCKET_FIELDS},
        )
        .order_by()
    )
    return _insert_select(
        CallRollupDay,
        rows,
        when="day",
        when_alias="r_day",
        team_alias="team_id",
        calls_alias="n_calls",
        ms_alias="n_ms",
        bucket_prefix="s_",
    )


def usage_rollup(*, now: datetime | None = None) -> dict[str, int]:
    """Roll the call records up by hour, from where the last run finished (less the look-back)
    to the current hour (partial; refilled next time). Idempotent; catches up after downtime in
    one transaction per day, reading `CHUNK_HOURS` of records per query (each well within the
    statement timeout). Returns hours and hourly rows written."""
    now = now or timezone.now()
    current = _hour_floor(now)
    state, _ = CallRollupState.objects.get_or_create(pk=1)
    oldest = ToolCall.objects.aggregate(first=Min("started_at"))["first"]
    hours = rows = 0
    if state.done_until is None:
        start = _hour_floor(oldest) if oldest else current
    else:
        start = state.done_until - timedelta(hours=LOOKBACK_HOURS)
        # Hours whose records were pruned meanwhile keep the rows they were rolled up into.
        if oldest is not None and _hour_floor(oldest) > start:
            start = min(_hour_floor(oldest), current)
    while start <= current:
        # One transaction per UTC day (its daily rows are refilled once), the raw records read
        # `CHUNK_HOURS` at a time.
        end = min(
            start.replace(hour=0) + timedelta(days=1),
            current + timedelta(hours=1),
        )
        with transaction.atomic():
            # The row lock serialises runs: a second one waits, then refills the same hours.
            CallRollupState.objects.select_for_update().get(pk=1)
            piece = start
            while piece < end:
                rows += _refill(piece, min(piece + timedelta(hours=CHUNK_HOURS), end))
                piece += timedelta(hours=CHUNK_HOURS)
            _refill_days(start, end)
            CallRollupState.objects.filter(pk=1).update(
                done_until=min(end, current), ran_at=timezone.now()
            )
        hours += int((end - start) / timedelta(hours=1))
        start = end
    return {"hours": hours, "rows": rows}


def usage_rollup_prune(*, keep_days: int) -> int:
    """Delete rollup rows older than `keep_days` days; how many were deleted."""
    cutoff = timezone.now() - timedelta(days=keep_days)
    deleted, _ = CallRollup.objects.filter(hour__lt=cutoff).delete()
    days, _ = CallRollupDay.objects.filter(day__lt=cutoff - timedelta(days=1)).delete()
    return deleted + days


# ---- percentiles and reports -----------------------------------------------------------------


def percentile(buckets: list[int], q: float) -> float | None:
    """The q-th percentile (0 < q <= 1, nearest rank) of the calls counted in `buckets`,
    interpolated inside its bucket; past the last bound, that bound. None without calls."""
    total = sum(buckets)
    if not total:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    low = 0.0
    for index, count in enumerate(buckets):
        if index >= len(LATENCY_BUCKETS_MS):
            return float(LATENCY_BUCKETS_MS[-1])
        high = float(LATENCY_BUCKETS_MS[index])
        if count and seen + count >= rank:
            return low + (rank - seen) / count * (high - low)
        seen += count
        low = high
    return float(LATENCY_BUCKETS_MS[-1])


@dataclass
class Stats:
    """Calls, errors, quota hits and the latency histogram of one row of a report."""

    calls: int = 0
    errors: int = 0
    quota_hits: int = 0
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKET_FIELDS))

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Stats:
        return cls(
            calls=row["n_calls"] or 0,
            errors=row["n_errors"] or 0,
            quota_hits=row["n_quota"] or 0,
            buckets=[row[f"s_{name}"] or 0 for name in BUCKET_FIELDS],
        )

    def add(self, other: Stats) -> None:
        self.calls += other.calls
        self.errors += other.errors
        self.quota_hits += other.quota_hits
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]

    @property
    def p50(self) -> float | None:
        return percentile(self.buckets, 0.50)

    @property
    def p95(self) -> float | None:
        return percentile(self.buckets, 0.95)

    @property
    def error_rate(self) -> float:
        return self.errors / self.calls if self.calls else 0.0


@dataclass
class Row:
    """One team, server or tool of a report, with the filter that lists its calls, the key that
    narrows the dashboard to it (a team's id, 0 for no team; a server's slug) and its calls per
    bin of the report's series (the sparkline)."""

    label: str
    stats: Stats
    filters: dict[str, str]
    key: int | str = ""
    spark: list[int] = field(default_factory=list)


@dataclass
class Failing:
    server_slug: str
    tool_name: str
    error_class: str
    outcome: str
    calls: int


@dataclass
class Point:
    start: datetime
    stats: Stats


@dataclass
class UsageReport:
    period: str
    title: str
    since: datetime
    source: str
    totals: Stats
    teams: list[Row]
    servers: list[Row]
    tools: list[Row]
    failing: list[Failing]
    series: list[Point]
    step: timedelta
    rolled_up_at: datetime | None = None
    team: int | None = None
    server: str | None = None
    team_label: str = ""
    filters: dict[str, str] = field(default_factory=dict)
    team_choices: list[tuple[int, str]] = field(default_factory=list)
    server_choices: list[str] = field(default_factory=list)


class _Source:
    """The same questions asked of raw records or of rollup rows, narrowed to one team and/or
    one server if asked (`window` stays the whole period: what the filter can choose from)."""

    def __init__(
        self,
        kind: Source,
        since: datetime,
        *,
        daily: bool = False,
        team: int | None = None,
        server: str | None = None,
    ) -> None:
        self.kind = kind
        if kind == "raw":
            self.window: QuerySet[Any] = ToolCall.objects.filter(started_at__gte=since).annotate(
                g_team=Coalesce("team_id", 0), g_time=F("started_at")
            )
            calls: Any = Count("id")
            self.sums: dict[str, Any] = {
                "n_calls": calls,
                "n_errors": Count("id", filter=~Q(outcome=CallOutcome.OK)),
                "n_quota": Count("id", filter=Q(error_class=QUOTA_EXCEEDED)),
                **{f"s_{name}": agg for name, agg in raw_bucket_counts().items()},
            }
        elif daily:
            self.window = CallRollupDay.objects.filter(
                day__gte=_hour_floor(since).replace(hour=0)
            ).annotate(g_team=F("team_id"), g_time=F("day"))
        else:
            self.window = CallRollup.objects.filter(hour__gte=_hour_floor(since)).annotate(
                g_team=F("team_id"), g_time=F("hour")
            )
        if kind != "raw":
            self.sums = {
                "n_calls": Sum("calls"),
                "n_errors": Sum("calls", filter=~Q(outcome=CallOutcome.OK)),
                "n_quota": Sum("calls", filter=Q(error_class=QUOTA_EXCEEDED)),
                **{f"s_{name}": Sum(name) for name in BUCKET_FIELDS},
            }
        self.base = self.window
        if team is not None:
            self.base = self.base.filter(self.of_team(team))
        if server is not None:
            self.base = self.base.filter(server_slug=server)

    def of_team(self, team: int) -> Q:
        """The records or rows of one team (0: of no team)."""
        if self.kind == "raw" and not team:
            return Q(team_id__isnull=True)
        return Q(team_id=team)

    def calls_where(self, where: Q) -> Any:
        """The calls of the rows that match `where`, as an aggregate."""
        return Count("id", filter=where) if self.kind == "raw" else Sum("calls", filter=where)

    def choices(self) -> list[tuple[int, str]]:
        """Every (team, server) that has calls in the whole period, whatever the filter."""
        return list(self.window.values_list("g_team", "server_slug").distinct().order_by())

    def grouped(self, *keys: str, top: int | None = TOP_ROWS) -> list[dict[str, Any]]:
        query = self.base.values(*keys).annotate(**self.sums).order_by("-n_calls", *keys)
        return list(query[:top] if top else query)

    def series(
        self, step: timedelta, extra: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The sums per bin of `step`, with the `extra` aggregates (the rows' sparklines) in the
        same query."""
        trunc: Any
        if step >= timedelta(days=1):
            trunc = TruncDay("g_time", tzinfo=UTC)
        elif step >= timedelta(hours=1):
            trunc = TruncHour("g_time", tzinfo=UTC)
        else:
            trunc = TruncMinute("g_time", tzinfo=UTC)
        return list(
            self.base.annotate(g_bin=trunc)
            .values("g_bin")
            .annotate(**self.sums, **(extra or {}))
            .order_by("g_bin")
        )

    def failing(self) -> list[dict[str, Any]]:
        count: Any = Count("id") if self.kind == "raw" else Sum("calls")
        return list(
            self.base.exclude(outcome=CallOutcome.OK)
            .values("server_slug", "tool_name", "error_class", "outcome")
            .annotate(n=count)
            .order_by("-n", "server_slug", "tool_name")[:TOP_ROWS]
        )


def _bins(since: datetime, now: datetime, step: timedelta) -> list[datetime]:
    first = _hour_floor(since)
    if step >= timedelta(days=1):
        first = first.replace(hour=0)
    bins = []
    moment = first
    while moment <= now:
        bins.append(moment)
        moment += step
    return bins


def _series(
    rows: Iterable[dict[str, Any]], bins: list[datetime], step: timedelta, lines: list[Row]
) -> list[Point]:
    """The report's points, and each of `lines`' sparkline (its `spark_<n>` sums), per bin."""
    points = [Point(start=start, stats=Stats()) for start in bins]
    for line in lines:
        line.spark = [0] * len(bins)
    for row in rows:
        moment = row["g_bin"]
        if moment is None:
            continue
        index = int((moment - bins[0]) / step)
        if 0 <= index < len(points):
            points[index].stats.add(Stats.of(row))
            for number, line in enumerate(lines):
                line.spark[index] += row[f"spark_{number}"] or 0
    return points


def usage_report(
    period: str,
    *,
    source: Source | None = None,
    now: datetime | None = None,
    team: int | None = None,
    server: str | None = None,
) -> UsageReport:
    """What the dashboard shows for `period` ("hour", "day", "month"): read from the raw records
    for the last hour and from the rollup otherwise (`source` overrides; the benchmark compares);
    narrowed to one `team` (its id, 0 for calls of no team) and/or one `server` (its slug) if
    given. Eight queries whatever the number of rows: the filter's choices, teams, team names,
    servers, tools, the series with every row's sparkline, failing tools, the rollup's state."""
    title, span = PERIODS[period]
    now = now or timezone.now()
    kind: Source = source or ("raw" if period == "hour" else "rollup")
    if period == "hour":
        # Twelve five-minute bins ending now, from the raw records (read by the minute).
        step = timedelta(minutes=5)
        since = (now - span).replace(second=0, microsecond=0) + timedelta(minutes=1)
        data = _Source(kind, since, team=team, server=server)
        bins = [since + step * i for i in range(12)]
        read_step = timedelta(minutes=1)
    elif period == "day":
        # Whole clock hours (UTC): the current one (as far as rolled up) and the 23 before it.
        step = read_step = timedelta(hours=1)
        since = _hour_floor(now) - span + step
        data = _Source(kind, since, team=team, server=server)
        bins = _bins(since, now, step)
    else:
        # Whole days (UTC), from the daily rows: today (as far as rolled up) and the 29 before.
        step = read_step = timedelta(days=1)
        since = _hour_floor(now).replace(hour=0) - span + step
        data = _Source(kind, since, daily=True, team=team, server=server)
        bins = _bins(since, now, step)

    choices = data.choices()
    team_rows = data.grouped("g_team")
    wanted = {pk for pk, _ in choices} | {r["g_team"] for r in team_rows} | {team or 0}
    names = dict(Team.objects.filter(pk__in=wanted - {0}).values_list("pk", "name"))

    def team_name(pk: int) -> str:
        return names.get(pk, "(no team)" if not pk else f"team {pk}")

    window = {"started_at__gte": since.astimezone(UTC).isoformat(timespec="seconds")}
    if team is not None:
        window.update({"team__id__exact": str(team)} if team else {"team__isnull": "True"})
    if server is not None:
        window["server_slug"] = server
    teams = [
        Row(
            label=team_name(r["g_team"]),
            stats=Stats.of(r),
            filters={
                **window,
                **(
                    {"team__id__exact": str(r["g_team"])}
                    if r["g_team"]
                    else {"team__isnull": "True"}
                ),
            },
            key=r["g_team"],
        )
        for r in team_rows
    ]
    servers = [
        Row(
            label=r["server_slug"] or "(none)",
            stats=Stats.of(r),
            filters={**window, "server_slug": r["server_slug"]},
            key=r["server_slug"],
        )
        for r in data.grouped("server_slug")
    ]
    tools = [
        Row(
            label=f"{r['server_slug']} / {r['tool_name']}",
            stats=Stats.of(r),
            filters={**window, "server_slug": r["server_slug"], "tool_name": r["tool_name"]},
            key=r["server_slug"],
        )
        for r in data.grouped("server_slug", "tool_name")
    ]
    # Every row's calls per bin, as conditional sums in the series' own query.
    lines = [*teams, *servers, *tools]
    wheres = [
        *(data.of_team(int(row.key)) for row in teams),
        *(Q(server_slug=row.key) for row in servers),
        *(Q(server_slug=row.key, tool_name=row.filters["tool_name"]) for row in tools),
    ]
    extra = {f"spark_{n}": data.calls_where(where) for n, where in enumerate(wheres)}
    series = _series(data.series(read_step, extra), bins, step, lines)
    failing = [
        Failing(
            server_slug=r["server_slug"],
            tool_name=r["tool_name"],
            error_class=r["error_class"],
            outcome=r["outcome"],
            calls=r["n"] or 0,
        )
        for r in data.failing()
    ]
    totals = Stats()
    for point in series:
        totals.add(point.stats)
    state = None if kind == "raw" else CallRollupState.objects.filter(pk=1).first()
    chosen_teams = {pk for pk, _ in choices} | ({team} if team is not None else set())
    chosen_servers = {slug for _, slug in choices} | ({server} if server is not None else set())
    return UsageReport(
        period=period,
        title=title,
        since=since,
        source=kind,
        totals=totals,
        teams=teams,
        servers=servers,
        tools=tools,
        failing=failing,
        series=series,
        step=step,
        rolled_up_at=state.ran_at if state else None,
        team=team,
        server=server,
        team_label=team_name(team) if team is not None else "",
        filters=window,
        team_choices=sorted(
            ((pk, team_name(pk)) for pk in chosen_teams), key=lambda c: (not c[0], c[1].lower())
        ),
        server_choices=sorted(chosen_servers),
    )
