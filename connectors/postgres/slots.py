"""The logical replication slots of a PostgreSQL server, as an operator watches them.

A slot holds back every WAL segment past its ``confirmed_flush_lsn`` (what the cdc stream
confirmed at a checkpoint): a slot nobody reads fills the disk. ``server_slots`` reads every
logical slot of the server in one query; slot names are unique per server (cluster), so
the server is named by its host and port (``server_name``), whichever database the URL names.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import psycopg

from connectors.postgres.connection import connect, error_words, mask_url

#: The prefix of the slot names the flows make (``cdc.default_slot_name``).
SLOT_PREFIX = "adf_"
#: A scrape or a status call waits this long for a server, not a reader's 10 s.
SLOTS_CONNECT_TIMEOUT_S = 3


@dataclass(frozen=True)
class SlotState:
    """One logical slot: its database, whether a session reads it now, the WAL bytes it
    holds back (``pg_current_wal_lsn() - confirmed_flush_lsn``) and its confirmed LSN."""

    slot: str
    database: str
    active: bool
    lag_bytes: int
    confirmed_lsn: str


def server_name(url: str) -> str:
    """``host:port`` of ``url``: the server whose slots it sees."""
    parts = urlsplit(url)
    return f"{parts.hostname or ''}:{parts.port or 5432}"


def server_slots(url: str) -> list[SlotState]:
    """Every logical slot of the server at ``url``, in one query; ``ConnectionError``
    naming the masked URL when the server cannot be asked."""
    try:
        with connect(
            url, autocommit=True, application_name="adf-slots", timeout_s=SLOTS_CONNECT_TIMEOUT_S
        ) as conn:
            rows = conn.execute(
                "SELECT slot_name, database, active, "
                "COALESCE(pg_current_wal_lsn() - confirmed_flush_lsn, 0)::bigint, "
                "COALESCE(confirmed_flush_lsn::text, '') "
                "FROM pg_catalog.pg_replication_slots WHERE slot_type = 'logical' ORDER BY slot_name"
            ).fetchall()
    except psycopg.Error as exc:
        raise ConnectionError(f"cannot read the slots of {mask_url(url)}: {error_words(exc)}") from None
    return [SlotState(row[0], row[1] or "", bool(row[2]), max(0, int(row[3])), row[4]) for row in rows]
