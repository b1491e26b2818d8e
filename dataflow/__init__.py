"""ActiveDataFlow: managed dataflows for Django (models, services, API, Celery tasks).

A Django app: a project lists ``"dataflow"`` in ``INSTALLED_APPS`` and runs its tasks on its
own Celery app (docs/install-into-your-project.md). Nothing is loaded on import: the
checkout's own Celery app (``dataflow.celery``) is loaded by ``DataflowConfig.ready()``
where the settings ask for it (``DATAFLOW_OWN_CELERY_APP``).
"""
