"""What the transform of a replay of dead letters (``dead_letters.dead_letters_replay``) does
differently from a bounded run's: it adds its rows to the sink under a name of the replay
run's own (``append``, as a stream's epoch does) instead of replacing what earlier runs
wrote, and, in the transaction that publishes them, settles the dead letters it replayed.
Everything else (attempts, fence, retries) is the bounded transform's."""

from __future__ import annotations

from typing import Any

from dataflow.models import DeadLetter, FlowRun
from dataflow.services.context import run_environment
from dataflow.services.streams.epochs import epoch_key
from source_support.registry import SINKS, Publish

#: The trigger of a replay run, and the one split it lands its records under.
REPLAY_TRIGGER = "replay"
REPLAY_SPLIT = "dead-letters"


def is_replay(run: FlowRun) -> bool:
    """Whether the run replays dead letters (it reads no source)."""
    return bool(run.spec.get("replay"))


def replay_epoch_key(run: FlowRun) -> str:
    """What names a replay run's files in the sink (``part-<key>.<ext>``): the run's own,
    so a retry of its transform replaces them instead of adding copies."""
    return epoch_key(run, 1)


def dead_letters_replay_commit(*, run: FlowRun) -> None:
    """Settles the dead letters a replay run replayed, in the transaction that publishes its
    rows: those whose record parsed are deleted (it is in the sink now), those that failed
    again become the run's own, with the reason they failed this time."""
    replay = run.spec.get("replay") or {}
    failed = {int(pk): reason for pk, reason in (replay.get("failed") or {}).items()}
    again = list(DeadLetter.objects.filter(pk__in=failed, flow_id=run.flow_id))
    for letter in again:
        letter.run_id, letter.error = run.pk, failed[letter.pk]
    DeadLetter.objects.bulk_update(again, ["run", "error"])
    replayed = DeadLetter.objects.filter(pk__in=replay.get("dead_letters") or [], flow_id=run.flow_id)
    replayed.exclude(pk__in=failed).delete()


class ReplayOutput:
    """A replay run's way into the sink: appended under the run's own name."""

    def __init__(self, run: FlowRun) -> None:
        self.run = run

    def write(self, result: Any, publish: Publish) -> bool:
        spec = self.run.spec
        append = SINKS[spec["sink_type"]].append
        assert append is not None  # a flow whose sink cannot append is refused a replay
        return append(
            result,
            spec["sink_config"],
            epoch_key=replay_epoch_key(self.run),
            publish=publish,
            env=run_environment(self.run),
        )

    def published(self) -> None:
        dead_letters_replay_commit(run=self.run)  # with the rows that reached the sink
