"""Celery application: the full-precision re-run worker (queue ``rerun``).

Start it with ``celery -A clinical worker -Q rerun --pool solo``: one task at
a time in the worker's main process, because the worker holds a vLLM engine
that spawns its own engine-core process (daemonic prefork children cannot).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "clinical.settings")

app = Celery("clinical")
app.config_from_object("django.conf:settings", namespace="CELERY")
# The tasks live in the re-run package, not in the app's top-level ``tasks``.
app.autodiscover_tasks(["clinical.rerun"])
