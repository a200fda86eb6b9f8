"""An order: the business write a task is enqueued with, in one transaction."""

from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    status = models.CharField(max_length=20, default="placed")
