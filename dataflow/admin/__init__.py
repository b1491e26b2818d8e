"""The admin: flows are edited in a form built from the connectors' declared options and
validated like TOML files, steered with the same service functions as the commands, and
their runs followed live. Each model's admin lives in the module named for it."""

from dataflow.admin import (  # noqa: F401  (registers the admins)
    connections,
    flows,
    limits,
    quotas,
    runs,
    schedules,
    tokens,
)
