"""The contract both halves of qgen share, and nothing else: the rendered file's format and its
reader (`rendered`), the steps each kind of file must hold, typed (`file_steps`), the dialect table (`dialects`), parameter style (`sqltext`), the errors
(`errors`) and schedules' declarations and slots (`schedule_slots`).

It imports only the standard library and itself (cronsim inside the one function that reads a
cron expression), so the generator can stand on it without loading drivers, forms or the
consumer. `tests/generator/test_layers.py` keeps it that way.
"""
