"""Seed the periodic tasks the workers need; admins may edit or disable them afterwards."""

from django.db import migrations

SCHEDULES = [
    # (name, task, every seconds, description)
    ("Health sweep", "toolroom.health_sweep", 10,
     "Claims the servers whose health check is due and fans the checks out in batches."),
    ("Warm runtime reconcile", "toolroom.runtime_reconcile", 15,
     "Starts the auto-start servers nobody holds, stops the ones nobody wants."),
    ("Scheduled discovery", "toolroom.discovery_schedule", 3600,
     "Re-discovers approved servers not discovered for six hours (catches definition changes)."),
    ("Health history prune", "toolroom.health_history_prune", 3600,
     "Keeps the newest health samples of every server."),
]


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    for name, task, seconds, description in SCHEDULES:
        interval, _ = IntervalSchedule.objects.get_or_create(every=seconds, period="seconds")
        PeriodicTask.objects.get_or_create(
            name=name,
            defaults={"task": task, "interval": interval, "description": description,
                      "expire_seconds": max(seconds, 10)},
        )


def remove(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name__in=[name for name, *_ in SCHEDULES]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("servers", "0002_discovery_health_runtime"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create, remove)]
