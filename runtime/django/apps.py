"""The Django app ``runtime.django`` (label ``qgen``): its migration creates the queue tables,
its management command ``qgen_worker`` runs them."""

from __future__ import annotations

from django.apps import AppConfig


class QgenConfig(AppConfig):
    name = "runtime.django"
    label = "qgen"
    verbose_name = "qgen tasks"
