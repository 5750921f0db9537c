"""Seed the periodic clean-up of old call records; admins may edit or disable it afterwards."""

from django.db import migrations

NAME = "Gateway call audit prune"


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    interval, _ = IntervalSchedule.objects.get_or_create(every=3600, period="seconds")
    PeriodicTask.objects.get_or_create(
        name=NAME,
        defaults={
            "task": "toolroom.gateway_calls_prune",
            "interval": interval,
            "description": "Deletes call records older than TOOLROOM_GATEWAY_CALL_RETENTION_DAYS.",
            "expire_seconds": 3600,
        },
    )


def remove(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0001_gateway_policy_and_call_audit"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create, remove)]
