"""Test connection: what a ``[source]`` or ``[sink]`` table reaches now, or what failed.

``connector_test`` holds the table to the rules a flow's is held to (the owner's granted
connections, the address policy, allowed and owned paths, reserved keys), builds the
connector as a run would, and asks it what it finds (``Source.describe_found`` after
``Source.check_input``; a sink's ``check``) within a time limit. It reads no record and
writes nothing; a secret is never in the answer (the connectors mask URLs).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.conf import settings

from dataflow.models import Connection
from dataflow.services.connections import (
    connection_target,
    flow_connections_check,
    flow_connections_resolve,
    is_deployment_redis,
)
from dataflow.services.environment import environment
from dataflow.services.probes import bounded_number, probe_slot, within
from dataflow.services.reserved import reserved_redis_keys
from dataflow.services.specs import flow_paths_check, flow_spec_of
from source_support.connections import CONNECTION_KINDS
from source_support.errors import ConfigError
from source_support.formats import FormatSpec, check_format_for_source, validate_format
from source_support.preview import source_found
from source_support.registry import SINKS, SOURCES, BuildContext, build_source, validate_sink, validate_source

SECTIONS = ("source", "sink")
DEFAULT_TIMEOUT_S = 5.0
MIN_TIMEOUT_S = 0.5
#: The most splits (files, streams, partitions) a test looks at.
MAX_FOUND = 200


def connector_test(
    *,
    section: str,
    table: dict[str, Any],
    owner,
    user=None,
    format_table: dict[str, Any] | None = None,
    timeout_s: object = None,
) -> dict[str, Any]:
    """``{"ok": True, "found": [...]}`` with what the ``section`` ("source" or "sink")
    ``table`` (its ``type`` and options) reaches now, in the connector's words, or
    ``{"ok": False, "field", "error"}`` with what failed when contacted (unreachable,
    refused, no such table, nothing matched within the time limit). ConfigError naming the
    field for a table a flow of ``owner`` could not have (no grant, an address or path
    not allowed). ``format_table``: the ``[format]`` a source is read with (default CSV,
    or field/value entries for a source of entries). ``user``: who asks, held to
    ``DATAFLOW_PREVIEWS_PER_USER`` at once."""
    if section not in SECTIONS:
        raise ConfigError("section", f"must be one of {', '.join(SECTIONS)}")
    seconds = _seconds(timeout_s)
    registry = SOURCES if section == "source" else SINKS
    if not isinstance(table, dict) or table.get("type") not in registry:
        raise ConfigError(f"{section}.type", f"must be one of {', '.join(sorted(registry))}")
    flow_connections_check({section: table, "format": format_table}, owner=owner)
    kind = table["type"]
    env = environment(
        connections=flow_connections_resolve(
            source_type=kind if section == "source" else "",
            source_config=table if section == "source" else {},
            sink_type=kind if section == "sink" else "",
            sink_config=table if section == "sink" else {},
            owner=owner,
        )
    )
    if section == "source":
        work = _source_work(table, env, owner=owner, format_table=format_table)
    else:
        work = _sink_work(table, env, owner=owner)
    field, what = _addressed(section, kind, table)
    with probe_slot(user=user, timeout_s=seconds):
        answer = _probe(work, seconds, field=field, what=what)
    return {"section": section, "type": kind, **answer}


#: The options that say where a connector's system is, in the order a table is searched.
ADDRESS_OPTIONS = ("connection", "bootstrap_servers", "servers", "url", "endpoint_url", "bucket", "path")


def _addressed(section: str, kind: str, table: dict[str, Any]) -> tuple[str, str]:
    """The field a test that does not answer in time is about (the table's address, as a
    run's refusal names it) and how its message says what did not answer."""
    for option in ADDRESS_OPTIONS:
        value = table.get(option)
        if isinstance(value, str) and value:
            return f"{section}.{option}", f"the {kind} {section} at {credentials_masked(value)}"
    return f"{section}.type", f"the {kind} {section}"


def connection_test_refusal(*, connection: Connection, user) -> str | None:
    """Why ``user`` may not test the stored ``connection`` (the API's and the admin's one
    rule), or None. A user it is granted to may test it, as their flows use it; staff may
    test any connection only with the permission to change connections (as Airflow's test
    button asks for edit rights): a staff account that may only view connections cannot make
    the service reach a system with the stored secret."""
    if user is None or user.is_superuser:
        return None
    if user.is_staff and not user.has_perm("dataflow.change_connection"):
        return f"you may view connection {connection.name!r} but not change it, so you may not test it"
    return None


def connection_test(*, connection: Connection, user, timeout_s: object = None) -> dict[str, Any]:
    """What the named ``connection`` reaches now, in its kind's words (``ConnectionKind.check``:
    the server answers, the keys its patterns match and their sizes), or what failed. The
    caller has checked that ``user`` may see it; it is resolved as a flow of ``user``'s
    would resolve it (granted, its address allowed). ConfigError naming ``connection`` for
    a kind that cannot be tested on its own."""
    kind = CONNECTION_KINDS.get(connection.type)
    if kind is None or kind.check is None:
        raise ConfigError(
            "connection", f"a {connection.type} connection is tested through a flow's source or sink"
        )
    check = kind.check
    seconds = _seconds(timeout_s)
    owner = None if user is None or user.is_staff or user.is_superuser else user
    target = connection_target(name=connection.name, owner=owner)
    if connection.type == "redis" and is_deployment_redis(connection.url):
        # the deployment's own keys are never listed, whatever the patterns say
        target = replace(target, reserved_keys=tuple(reserved_redis_keys()))
    with probe_slot(user=user, timeout_s=seconds):
        answer = _probe(
            lambda: check(target), seconds, field="connection", what=f"connection {connection.name!r}"
        )
    return {"connection": connection.name, "type": connection.type, **answer}


def flow_check(
    *, flow_spec: dict[str, Any], owner, user=None, timeout_s: object = None
) -> list[dict[str, Any]]:
    """``connector_test`` of a flow spec's ``[source]`` (with its ``[format]``) and
    ``[sink]``, in that order."""
    return [
        connector_test(
            section=section,
            table=flow_spec.get(section) or {},
            owner=owner,
            user=user,
            format_table=flow_spec.get("format") if section == "source" else None,
            timeout_s=timeout_s,
        )
        for section in SECTIONS
    ]


def stored_flow_check(*, flow, user=None, timeout_s: object = None) -> list[dict[str, Any]]:
    """``flow_check`` of a stored flow, held to its owner's rules."""
    return flow_check(flow_spec=flow_spec_of(flow), owner=flow.owner, user=user, timeout_s=timeout_s)


def _seconds(timeout_s: object) -> float:
    return bounded_number(
        timeout_s,
        field="timeout_s",
        default=DEFAULT_TIMEOUT_S,
        least=MIN_TIMEOUT_S,
        most=settings.DATAFLOW_PREVIEW_MAX_SECONDS,
    )


def _probe(work: Callable[[], list[str]], seconds: float, *, field: str, what: str) -> dict[str, Any]:
    """``{"ok": True, "found"}``, or ``{"ok": False, "field", "error"}`` with what failed:
    a connector's refusal as it words it, any other error as its type and first line."""
    try:
        return {"ok": True, "found": within(seconds, work, field=field, what=what)}
    except ConfigError as exc:
        return {"ok": False, "field": exc.field, "error": exc.reason}
    except Exception as exc:  # noqa: BLE001 - a system that failed in its own way: said, not raised
        first = (str(exc).strip().splitlines() or [""])[0]
        return {"ok": False, "field": field, "error": f"{type(exc).__name__}: {credentials_masked(first)}"}


#: A URL's credentials (``scheme://user:secret@``), wherever they are in a message.
URL_CREDENTIALS_RE = re.compile(r"(\w+://[^\s:/@]*:)[^\s@]+@")


def credentials_masked(text: str) -> str:
    """``text`` with every URL's password replaced by ``****``."""
    return URL_CREDENTIALS_RE.sub(r"\1****@", text)


def _source_work(table: dict[str, Any], env, *, owner, format_table: dict[str, Any] | None):
    source_type, source_config = validate_source(table, env)
    if owner is not None:
        flow_paths_check(source_config=source_config, sink_config={}, owner=owner)
    entries = SOURCES[source_type].reads_entries
    fmt = validate_format(format_table or {"type": "fields" if entries else "csv"}, env)
    check_format_for_source(fmt, entries=entries)
    context = BuildContext(env=env, batch_size=1, flow_name="connection-test", probe=True)

    def work() -> list[str]:
        source = build_source(source_type, source_config, FormatSpec(fmt.type, fmt.options), context)
        return source_found(source, max_splits=MAX_FOUND)

    return work


def _sink_work(table: dict[str, Any], env, *, owner):
    sink_type, sink_config = validate_sink(table, env)
    if owner is not None:
        flow_paths_check(source_config={}, sink_config=sink_config, owner=owner)
    check = SINKS[sink_type].check

    def work() -> list[str]:
        if check is None:
            return [f"a {sink_type} sink is looked at by its run only: its options are valid"]
        return check(sink_config, env)

    return work
