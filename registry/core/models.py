"""Core's rows: heartbeats of the long-running processes (workers, runtime workers, beat), for
readiness, and the shared cache's epoch (registry/core/cache.py)."""

from __future__ import annotations

from django.db import models


class ProcessKind(models.TextChoices):
    WORKER = "worker", "Worker"
    RUNTIME = "runtime", "Runtime worker"
    BEAT = "beat", "Beat"


class ProcessHeartbeat(models.Model):
    """The last sign of life of one process in one role, written every TOOLROOM_HEARTBEAT_SECONDS
    by the process itself (workers/heartbeat.py); `/readyz` and `manage.py probe` read it. A
    process with several roles (the quickstart's one worker serves every queue and holds the
    runtimes) writes one row per role."""

    name = models.CharField(max_length=200, help_text="celery node name, beat@host")
    kind = models.CharField(max_length=20, choices=ProcessKind.choices)
    host = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField(db_index=True)
    # What the process saw of its own dependencies (the Docker engine for workers), its queues.
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["kind", "name"]
        constraints = [
            models.UniqueConstraint(fields=["name", "kind"], name="process_heartbeat_one_per_role")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


# The catalogue cache's epoch: the database's word on which generation of the cache may be read.
# Everything cached under a team's or a token's name (versions, token lookups) is keyed by the
# epoch of its cache. The epoch moves when the cache may hold something the database has moved
# past: a write to the cache failed, or the cache server restarted (its `run_id` changed). Old keys
# then become unreachable at once, whatever the cache holds. See docs/catalogue.md.
class CatalogueCacheEpoch(models.Model):
    # sha256 of the cache's location and key prefix: one row per cache, so installations (or test
    # runs) sharing a database but not a cache keep epochs of their own.
    cache = models.CharField(max_length=64, unique=True)
    epoch = models.PositiveBigIntegerField(default=1)
    # The cache server's run id when the epoch was last confirmed (Redis changes it on restart).
    server_run_id = models.CharField(max_length=64, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    changed_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "catalogue cache epoch"
        # The catalogue app made the table; the model moved to core with the cache, the rows stay.
        db_table = "catalogue_cataloguecacheepoch"

    def __str__(self) -> str:
        return f"cache {self.cache[:12]} epoch {self.epoch}"
