"""The shop's tasks: Django's @task functions, run by `manage.py qgen_worker`."""

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

from shop.models import Order


@task
def ship(order_id: int) -> dict:
    """Mark the order shipped; the return value is the task's result."""
    order = Order.objects.get(pk=order_id)
    order.status = "shipped"
    order.save()
    return {"order": order_id, "status": order.status}


@task(queue_name="emails", priority=10)
def receipt(order_id: int, to: str = "") -> str:
    """Fails for an address without '@': retried once, then FAILED with its traceback."""
    if "@" not in to:
        raise ValueError(f"no address for order {order_id}: {to!r}")
    return f"sent to {to}"


@task(takes_context=True)
async def audit(context, note: str) -> dict:
    """An async task that reads its context: which attempt it is."""
    return {"note": note, "attempt": context.attempt}
