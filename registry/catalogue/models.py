"""The catalogue cache's epoch: the database's word on which generation of the cache may be read.

Everything the catalogue caches under a team's or a token's name (versions, token lookups) is
keyed by the epoch of its cache. The epoch moves when the cache may hold something the database
has moved past: a write to the cache failed, or the cache server restarted (its `run_id` changed).
Old keys then become unreachable at once, whatever the cache holds. See docs/catalogue.md.
"""

from __future__ import annotations

from django.db import models


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

    def __str__(self) -> str:
        return f"cache {self.cache[:12]} epoch {self.epoch}"
