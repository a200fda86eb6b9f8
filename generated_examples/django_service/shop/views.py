"""What a request does: the order and its tasks in one transaction."""

from django.db import transaction

from shop.models import Order
from shop.tasks import receipt, ship


def place_order(item: str, email: str, fail: bool = False) -> tuple[int, list[str]]:
    """Create the order and enqueue its tasks in one atomic() block: both commit, or (fail)
    both roll back. Returns the order's id and the tasks' result ids."""
    with transaction.atomic():
        order = Order.objects.create(item=item)
        results = [ship.enqueue(order.id), receipt.enqueue(order.id, to=email)]
        if fail:
            raise RuntimeError("payment declined")
    return order.id, [r.id for r in results]
