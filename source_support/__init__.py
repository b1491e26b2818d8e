"""The Flink source model (FLIP-27) in plain Python.

Nothing in this package imports Django or Celery. Connectors build on the base classes in
``api`` (stream connectors on those in ``streams``, which hold what they share); the
runtime (``dataflow``) drives them through the contexts in ``coordination``.
"""
