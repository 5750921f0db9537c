# The cache epoch's model moves from the catalogue app to core with the cache helpers
# (registry/core/cache.py). Only Django's state changes: the table stays where it is and keeps its
# name (db_table) and rows.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0001_process_heartbeat"),
        ("catalogue", "0001_cache_epoch"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="CatalogueCacheEpoch",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("cache", models.CharField(max_length=64, unique=True)),
                        ("epoch", models.PositiveBigIntegerField(default=1)),
                        ("server_run_id", models.CharField(blank=True, max_length=64)),
                        ("reason", models.CharField(blank=True, max_length=200)),
                        ("changed_at", models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        "verbose_name": "catalogue cache epoch",
                        "db_table": "catalogue_cataloguecacheepoch",
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
