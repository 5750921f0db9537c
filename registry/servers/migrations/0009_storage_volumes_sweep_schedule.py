"""Seed the storage volume sweep every five minutes; admins may edit or disable it afterwards."""

from django.db import migrations

NAME = "Storage volume sweep"


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    interval, _ = IntervalSchedule.objects.get_or_create(every=300, period="seconds")
    PeriodicTask.objects.get_or_create(
        name=NAME,
        defaults={
            "task": "toolroom.storage_volumes_sweep",
            "interval": interval,
            "description": "Measures the sandboxed servers' storage volumes (over its limit, a "
            "volume is mounted read-only) and removes those admins deleted, whose server is gone "
            "or whose conversation ended.",
            "expire_seconds": 240,
        },
    )


def remove(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("servers", "0008_storage_and_env_not_secret"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create, remove)]
