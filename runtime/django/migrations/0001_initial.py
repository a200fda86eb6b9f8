"""The queue tables of every qgen tasks backend (TASKS), from the rendered files' schema
blocks for the database's dialect. Reversing it leaves the tables (see ApplyQueues)."""

from django.db import migrations

from runtime.django.operations import ApplyQueues


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [ApplyQueues()]
