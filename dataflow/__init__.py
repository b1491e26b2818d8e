"""ActiveDataFlow: managed dataflows for Django (models, services, API, Celery tasks)."""

from dataflow.celery import app as celery_app

__all__ = ["celery_app"]
