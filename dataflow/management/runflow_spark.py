"""Whether ``manage.py runflow NAME`` should start the Spark driver before Django's set-up.

The driver's JVM takes seconds to start, so ``runflow`` starts it before Django sets up (about
a second of overlap); but a bounded flow whose transform is the identity into a sink that
takes the landed files needs no Spark at all (``dataflow.services.runs.landed``), and a JVM
started for nothing takes a core for seconds. So the flow's row is read first, with a plain
query on Django's connection (the settings are configured; the apps are not yet set up), and
the connector plugins loaded; on any doubt (no such flow, no table yet, a database that does
not answer) the answer is yes, as before.
"""

from __future__ import annotations

import json
import logging
import warnings
from typing import Any

from django.db import connection

from dataflow.services.runs.landed import flow_needs_spark
from source_support.plugins import load_connectors

log = logging.getLogger("dataflow.runflow")


def runflow_needs_spark(argv: list[str]) -> bool:
    """For ``runflow``'s arguments (after the command's name): whether to start Spark now."""
    names = [arg for arg in argv if not arg.startswith("-")]
    if not names:
        return True
    try:
        with warnings.catch_warnings(), connection.cursor() as cursor:
            # Deliberate: one plain query before the apps are set up (see the docstring).
            warnings.filterwarnings("ignore", "Accessing the database during app initialization")
            cursor.execute(
                "SELECT source_type, source_config, transform_sql, sink_type, sink_config "
                "FROM dataflow_dataflow WHERE name = %s",
                [names[0]],
            )
            row = cursor.fetchone()
        if row is None:
            return True
        source_type, source_config, sql, sink_type, sink_config = row
        load_connectors()
        return flow_needs_spark(
            source_type=source_type,
            source_config=_json(source_config),
            transform_sql=sql,
            sink_type=sink_type,
            sink_config=_json(sink_config),
        )
    except Exception as exc:  # noqa: BLE001 - any doubt: warm Spark up as always
        log.debug("could not tell whether the flow needs Spark: %s", exc)
        return True
    finally:
        connection.close()  # Django opens its own once set up


def _json(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str | bytes) else value
