"""Management commands: ``applyflows``, ``runflow``, ``flowctl`` and the rest, each a thin
adapter over the same service functions the admin and the API call."""
