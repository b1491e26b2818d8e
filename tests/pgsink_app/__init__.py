"""A tiny Django app holding the model of ``docs/postgres-sink.md`` (installed by its test)."""
