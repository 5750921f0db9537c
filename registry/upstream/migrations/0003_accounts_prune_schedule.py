"""Seed the hourly sweep of upstream links whose grants expired; admins may edit or disable it."""

from django.db import migrations

NAME = "Upstream accounts prune"


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    interval, _ = IntervalSchedule.objects.get_or_create(every=3600, period="seconds")
    PeriodicTask.objects.get_or_create(
        name=NAME,
        defaults={
            "task": "toolroom.upstream_accounts_prune",
            "interval": interval,
            "description": "Removes the upstream links of people no team of theirs holds a grant "
            "on the server for any more (grants that expired fire no signal).",
            "expire_seconds": 3600,
        },
    )


def remove(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("upstream", "0002_discovery_account"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create, remove)]
