"""The replication slots the cdc flows own, and the ones left behind on the same servers.

A cdc flow owns its slot once one of its runs made it (the run's plan holds the slot's
consistent point) until the flow is deleted (``Source.release`` drops it). A slot on one
of those servers whose name starts with ``adf_`` (the flows' naming) that no flow owns is
*left behind*: it holds WAL back until the disk fills.

Cost: one query per server (``connectors.postgres.slots.server_slots``), its answer kept
``DATAFLOW_POSTGRES_SLOT_CACHE_SECONDS`` in the process, so scrapes, status calls and the
dashboard share it; a report over more than ``DATAFLOW_POSTGRES_SLOT_SERVERS_MAX`` servers
is refused (``ConfigError``), never fanned out.

Lag: ``lag_bytes`` is ``pg_current_wal_lsn() - confirmed_flush_lsn`` (what the slot holds
back); ``lag_seconds`` is the time since the slot was last confirmed, as this process saw it:
since its ``confirmed_flush_lsn`` was first seen at its present value (0 while it holds
nothing back). A process that just started counts from its first look: a lower bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from connectors.postgres.cdc import drop_slot
from connectors.postgres.slots import SLOT_PREFIX, SlotState, server_name, server_slots
from connectors.postgres.source import PostgresSource, made_slot
from dataflow.models import DataFlow, FlowRun
from dataflow.services.context import source_for
from source_support.errors import ConfigError

_lock = threading.Lock()
#: server -> (monotonic time read, its slots or why they could not be read)
_answers: dict[str, tuple[float, list[SlotState] | str]] = {}
#: flow id -> (monotonic time read, the slot it owns)
_owners: dict[int, tuple[float, _Owned | None]] = {}
#: (server, slot) -> (confirmed LSN, wall time it was first seen at that LSN)
_confirms: dict[tuple[str, str], tuple[str, float]] = {}


@dataclass(frozen=True)
class FlowSlot:
    """A cdc flow's slot as its server reports it (``found`` False: the server does not list
    it, or could not be asked: ``error``)."""

    flow: str
    owner: str
    slot: str
    server: str
    database: str = ""
    found: bool = False
    active: bool = False
    lag_bytes: int | None = None
    lag_seconds: float | None = None
    over_limit: bool = False
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "flow": self.flow,
            "owner": self.owner,
            "slot": self.slot,
            "server": self.server,
            "database": self.database,
            "found": self.found,
            "active": self.active,
            "lag_bytes": self.lag_bytes,
            "lag_seconds": self.lag_seconds,
            "over_limit": self.over_limit,
            "error": self.error,
        }


@dataclass
class SlotReport:
    """The slots of some flows, and (for staff) the slots left behind on their servers."""

    flows: list[FlowSlot] = field(default_factory=list[FlowSlot])
    left_behind: list[FlowSlot] = field(default_factory=list[FlowSlot])
    #: Servers not asked (``capped`` reports: past ``DATAFLOW_POSTGRES_SLOT_SERVERS_MAX``).
    servers_skipped: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "slots": [s.as_dict() for s in self.flows],
            "left_behind": [s.as_dict() for s in self.left_behind],
            "max_lag_mb": settings.DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB,
        }


@dataclass(frozen=True)
class _Owned:
    flow: DataFlow
    url: str
    slot: str

    @property
    def server(self) -> str:
        return server_name(self.url)


def cdc_flows() -> Any:
    """The flows whose source is a postgres table read in cdc mode."""
    return DataFlow.objects.filter(source_type="postgres", source_config__mode="cdc")


def _owned_slot(flow: DataFlow) -> _Owned | None:
    """The slot ``flow`` owns: its name and URL as its latest run that made one built them
    (kept ``DATAFLOW_POSTGRES_SLOT_CACHE_SECONDS``, as the server's answer)."""
    now = time.monotonic()
    with _lock:
        cached = _owners.get(flow.pk)
    if cached is not None and now - cached[0] < settings.DATAFLOW_POSTGRES_SLOT_CACHE_SECONDS:
        return cached[1]
    owned = _owned_slot_read(flow)
    with _lock:
        _owners[flow.pk] = (now, owned)
    return owned


def _owned_slot_read(flow: DataFlow) -> _Owned | None:
    runs = FlowRun.objects.filter(flow=flow, enumerator_state__plan__stream_lsn__isnull=False).order_by("-pk")
    run = next((r for r in runs[:5] if made_slot(r.enumerator_state)), None)
    if run is None:
        return None
    try:
        source = source_for(run)
    except ConfigError:
        return None  # a revoked grant or an undecryptable secret: it cannot be asked
    if not isinstance(source, PostgresSource) or source.slot is None:
        return None
    return _Owned(flow, source.url, source.slot)


def _slots_of(url: str) -> list[SlotState] | str:
    """The server's slots, at most ``DATAFLOW_POSTGRES_SLOT_CACHE_SECONDS`` old; or why not."""
    server = server_name(url)
    now = time.monotonic()
    with _lock:
        cached = _answers.get(server)
        if cached is not None and now - cached[0] < settings.DATAFLOW_POSTGRES_SLOT_CACHE_SECONDS:
            return cached[1]
    try:
        answer: list[SlotState] | str = server_slots(url)
    except ConnectionError as exc:
        answer = str(exc)
    with _lock:
        _answers[server] = (time.monotonic(), answer)
        if not isinstance(answer, str):
            _note_confirms(server, answer)
    return answer


def _note_confirms(server: str, states: list[SlotState]) -> None:
    wall = time.time()
    for state in states:
        seen = _confirms.get((server, state.slot))
        if seen is None or seen[0] != state.confirmed_lsn:
            _confirms[(server, state.slot)] = (state.confirmed_lsn, wall)


def _lag_seconds(server: str, state: SlotState) -> float:
    if state.lag_bytes == 0:
        return 0.0
    seen = _confirms.get((server, state.slot))
    return round(max(0.0, time.time() - seen[1]), 3) if seen else 0.0


def _over_limit(lag_bytes: int) -> bool:
    return lag_bytes > settings.DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB * 1024 * 1024


def _figure(owned: _Owned, states: list[SlotState] | str) -> FlowSlot:
    base = {
        "flow": owned.flow.name,
        "owner": owned.flow.owner.get_username() if owned.flow.owner else "",
        "slot": owned.slot,
        "server": owned.server,
    }
    if isinstance(states, str):
        return FlowSlot(**base, error=states)
    state = next((s for s in states if s.slot == owned.slot), None)
    if state is None:
        return FlowSlot(**base, error="the server lists no slot of that name")
    return _state_figure(base, owned.server, state)


def _state_figure(base: dict[str, Any], server: str, state: SlotState) -> FlowSlot:
    return FlowSlot(
        **base,
        database=state.database,
        found=True,
        active=state.active,
        lag_bytes=state.lag_bytes,
        lag_seconds=_lag_seconds(server, state),
        over_limit=_over_limit(state.lag_bytes),
    )


def _servers_check(owned: list[_Owned], capped: bool) -> tuple[list[_Owned], int]:
    """``owned`` on at most ``DATAFLOW_POSTGRES_SLOT_SERVERS_MAX`` servers, and how many
    servers were left out (``capped``); refused past the limit otherwise."""
    servers = sorted({o.server for o in owned})
    limit = settings.DATAFLOW_POSTGRES_SLOT_SERVERS_MAX
    if len(servers) > limit and capped:
        kept = set(servers[:limit])
        return [o for o in owned if o.server in kept], len(servers) - limit
    if len(servers) > limit:
        raise ConfigError(
            "flow",
            f"the slots of {len(servers)} servers were asked for at once; at most "
            f"{limit} (DATAFLOW_POSTGRES_SLOT_SERVERS_MAX): name one flow",
        )
    return owned, 0


def slots_report(*, flows: Iterable[DataFlow], left_behind: bool = False, capped: bool = False) -> SlotReport:
    """The slots the cdc flows among ``flows`` own, with their lag; with ``left_behind``,
    also the ``adf_`` slots on those servers that no flow (of any owner) owns. Over more
    than ``DATAFLOW_POSTGRES_SLOT_SERVERS_MAX`` servers: refused (``ConfigError``), or with
    ``capped`` (a scrape) the first servers only, the others counted as skipped."""
    wanted = [o for o in (_owned_slot(f) for f in flows if _is_cdc(f)) if o is not None]
    wanted, skipped = _servers_check(wanted, capped)
    report = SlotReport(servers_skipped=skipped)
    answers: dict[str, list[SlotState] | str] = {}
    for owned in wanted:
        answers.setdefault(owned.server, _slots_of(owned.url))
        report.flows.append(_figure(owned, answers[owned.server]))
    if left_behind and answers:
        report.left_behind = _left_behind(answers)
    return report


def _is_cdc(flow: DataFlow) -> bool:
    return flow.source_type == "postgres" and (flow.source_config or {}).get("mode") == "cdc"


def _all_owned() -> set[tuple[str, str]]:
    """(server, slot) of every slot a flow owns, whoever owns the flow."""
    return {(o.server, o.slot) for o in (_owned_slot(f) for f in cdc_flows()) if o is not None}


def _left_behind(answers: dict[str, list[SlotState] | str]) -> list[FlowSlot]:
    owned = _all_owned()
    return [
        _state_figure({"flow": "", "owner": "", "slot": state.slot, "server": server}, server, state)
        for server, states in answers.items()
        if not isinstance(states, str)
        for state in states
        if state.slot.startswith(SLOT_PREFIX) and (server, state.slot) not in owned
    ]


def slot_drop(*, user: Any, slot: str) -> dict[str, Any]:
    """Drops ``slot``, left behind on a server of the cdc flows: staff only; a slot a flow
    owns is refused (delete the flow to drop it). ConfigError naming ``slot`` otherwise."""
    if not getattr(user, "is_staff", False):
        raise ConfigError("slot", "only staff or the operator may drop a replication slot")
    with _lock:  # asked afresh: a slot a flow made a moment ago is not dropped
        _answers.clear()
        _owners.clear()
    report = slots_report(flows=cdc_flows(), left_behind=True)
    owner = next((s for s in report.flows if s.slot == slot), None)
    if owner is not None:
        raise ConfigError(
            "slot",
            f"slot {slot!r} belongs to flow {owner.flow!r}: stop it and delete the flow to drop it",
        )
    found = next((s for s in report.left_behind if s.slot == slot), None)
    if found is None:
        raise ConfigError("slot", f"no slot {slot!r} is left behind on the servers of the cdc flows")
    # A logical slot is dropped from a session on its own database.
    url = next(
        (
            o.url
            for o in (_owned_slot(f) for f in cdc_flows())
            if o is not None
            and o.server == found.server
            and urlsplit(o.url).path.lstrip("/") == found.database
        ),
        None,
    )
    if url is None:
        raise ConfigError(
            "slot",
            f"slot {slot!r} is on database {found.database!r}, which no cdc flow reaches: drop it there "
            f"with SELECT pg_drop_replication_slot('{slot}')",
        )
    try:
        drop_slot(url, slot)
    except ConnectionError as exc:
        raise ConfigError("slot", str(exc)) from None
    with _lock:
        _answers.pop(found.server, None)
    return {"dropped": slot, "server": found.server}


def slot_cache_clear() -> None:
    """Forgets every cached answer (tests, and a drop)."""
    with _lock:
        _answers.clear()
        _owners.clear()
        _confirms.clear()
