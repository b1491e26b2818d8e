"""The contexts of the source model, run on Redis.

Redis holds what is short-lived and shared between processes: which reader instance owns
which subtask (a key with a time-to-live that heartbeats renew), split requests, assignment
notices, source events, the per-flow enumerator lock. What must survive a crash (splits,
checkpoints, who was assigned what) is kept by a ``SplitStore`` the runtime provides.

- ``keys``: the Redis key layout of a run (it never changes: deployments keep their keys);
- ``leases``: reader leases and job leases, renewed by Lua scripts that check the holder;
- ``messages``: split requests, assignment notices, source events, a reader's inbox;
- ``marks``: run-wide marks (a job queued, a report due, readers paused);
- ``protocol``: ``RunCoordinator``, what the runtime needs of a run's shared state;
- ``coordinator``: ``RedisRunCoordinator``, the run's Redis side made of the above;
- ``store``: the ``SplitStore`` protocol and the enumerator's backlog in it;
- ``contexts``: the enumerator's and a reader's context over a coordinator and a store.
"""

from source_support.coordination.contexts import RunEnumeratorContext, RunReaderContext
from source_support.coordination.coordinator import RedisRunCoordinator
from source_support.coordination.keys import DAY_MS, Keys, Mark
from source_support.coordination.leases import HeldLease
from source_support.coordination.messages import (
    SPLITS_REVOKED,
    AssignedSplit,
    PassInputs,
    ReaderInbox,
    decode_notices,
)
from source_support.coordination.protocol import ReaderNotices, RunCoordinator
from source_support.coordination.store import SplitStore, StoreBacklog

__all__ = [
    "DAY_MS",
    "SPLITS_REVOKED",
    "AssignedSplit",
    "HeldLease",
    "Keys",
    "Mark",
    "PassInputs",
    "ReaderInbox",
    "ReaderNotices",
    "RedisRunCoordinator",
    "RunCoordinator",
    "RunEnumeratorContext",
    "RunReaderContext",
    "SplitStore",
    "StoreBacklog",
    "decode_notices",
]
