"""Seed the daily sandbox image prune; admins may edit or disable it afterwards."""

from django.db import migrations

NAME = "Sandbox image prune"


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    interval, _ = IntervalSchedule.objects.get_or_create(every=86400, period="seconds")
    PeriodicTask.objects.get_or_create(
        name=NAME,
        defaults={
            "task": "toolroom.sandbox_images_prune",
            "interval": interval,
            "description": "Removes the sandbox images no server uses any more (keeps each "
            "server's last TOOLROOM_SANDBOX_PRUNE_KEEP, never the base images).",
            "expire_seconds": 3600,
        },
    )


def remove(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("servers", "0005_sandbox_preparation"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create, remove)]
