# The cache epoch's model now belongs to core (core.0002): the catalogue forgets it in Django's state
# only; the table and its rows stay, core's model names the same table.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("catalogue", "0001_cache_epoch"),
        ("core", "0002_cache_epoch_moves_to_core"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="CatalogueCacheEpoch")],
            database_operations=[],
        ),
    ]
