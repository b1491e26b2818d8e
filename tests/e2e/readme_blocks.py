"""The README's marked blocks, and commands' output as the README shows it.

A block the README test drives is preceded by an HTML comment, invisible when rendered:

    <!-- readme-test: NAME ROLE -->

- ``run``: a shell block; each command (``\\`` continues a line) is run in the checkout.
- ``output``: a text block. Lines starting with ``$ `` are commands, run in order; the other
  lines are what they print. A block with no ``$`` line shows what the ``run`` blocks of the
  same NAME print.
- ``file PATH``: a block that must be the content of PATH in the checkout.

Outputs are compared as a terminal shows them (``terminal_lines``: a progress bar only in
its last state) after ``normalise``, which removes only what differs run to run: times,
Spark application ids, part-file uuids, the checkout's path, progress-bar timings, column
alignment (it follows the path's length), and the order in which log records (stderr,
through logging) and the command's own lines interleave.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

# The checkout the README's outputs were produced in; stands for the test's own copy.
README_CHECKOUT = "/tmp/readme-try"

_MARKER = re.compile(r"^<!-- readme-test: (?P<name>[\w-]+) (?P<role>run|output|file)(?: (?P<arg>\S+))? -->$")
_FENCE = re.compile(r"^```")
_LOG_RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ ")
# A tqdm bar: "phase: 42%|███  | 2/4 [00:01<00:02, 1.2split/s, ...]" or "phase: 0split [00:00, ?split/s]".
_PROGRESS_BAR = re.compile(r"^[\w ()]+: .*\[[0-9:]+(<[0-9:?]+)?(,[^\]]*)?\]\s*$")


@dataclass
class Step:
    """The commands and expected output of one NAME."""

    name: str
    commands: list[str] = field(default_factory=list)
    output: str | None = None


@dataclass
class ReadmeBlocks:
    steps: dict[str, Step]
    files: dict[str, str]  # PATH -> the block's content


def parse_readme(text: str) -> ReadmeBlocks:
    """Every marked block of the README, by NAME; a marker not followed by a block is an error."""
    lines = text.splitlines()
    steps: dict[str, Step] = {}
    files: dict[str, str] = {}
    i = 0
    while i < len(lines):
        marker = _MARKER.match(lines[i].strip())
        if marker is None and lines[i].lstrip().startswith("<!-- readme-test"):
            raise ValueError(f"README line {i + 1}: a readme-test marker must read {_MARKER.pattern}")
        i += 1
        if not marker:
            continue
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i >= len(lines) or not _FENCE.match(lines[i]):
            raise ValueError(f"README line {i}: marker {marker.group(0)} is not followed by a fenced block")
        end = i + 1
        while end < len(lines) and not _FENCE.match(lines[end]):
            end += 1
        body = lines[i + 1 : end]
        i = end + 1
        name, role = marker.group("name"), marker.group("role")
        if role == "file":
            files[marker.group("arg")] = "\n".join(body) + "\n"
            continue
        step = steps.setdefault(name, Step(name))
        if role == "run":
            step.commands.extend(_commands(body))
        else:
            if step.output is not None:
                raise ValueError(f"README: two output blocks for {name}")
            commands = [line[2:] for line in body if line.startswith("$ ")]
            step.commands.extend(commands)
            step.output = "\n".join(line for line in body if not line.startswith("$ "))
    return ReadmeBlocks(steps, files)


def _commands(body: list[str]) -> list[str]:
    """Shell commands, one a line; a line ending in ``\\`` or inside quotes goes on."""
    commands, pending = [], ""
    for line in body:
        pending += line + "\n"
        if line.endswith("\\") or not _quotes_closed(pending):
            continue
        if pending.strip() and not pending.lstrip().startswith("#"):
            commands.append(pending.rstrip("\n"))
        pending = ""
    return commands


def _quotes_closed(command: str) -> bool:
    try:
        shlex.split(command)
    except ValueError:  # "No closing quotation"
        return False
    return True


def terminal_lines(raw: str) -> list[str]:
    """What stays on a terminal: a carriage return starts the line again, a progress bar
    shows only its last state, and a log record starts its own line."""
    lines: list[str] = []
    last_bar: int | None = None
    for physical in raw.split("\n"):
        for piece in physical.split("\r"):
            for segment in _split_log_records(piece):
                segment = segment.rstrip()
                if not segment:
                    continue
                if _PROGRESS_BAR.match(segment):
                    if last_bar is not None:
                        lines[last_bar] = segment
                        continue
                    last_bar = len(lines)
                lines.append(segment)
    return lines


def _split_log_records(piece: str) -> list[str]:
    starts = [m.start() for m in _LOG_RECORD.finditer(piece)]
    if not starts or starts[0] != 0:
        starts = [0, *starts]
    return [piece[a:b] for a, b in zip(starts, [*starts[1:], len(piece)], strict=True)]


_VOLATILE = [
    # Times the service stamps (a log record's; a run's start), not dates in the data.
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"), "<time>"),
    (re.compile(r"\b(started|ended|finished|stale since) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d"), r"\1 <time>"),
    (re.compile(r"application local-\d+"), "application local-<id>"),
    (re.compile(r"application app-[\w-]+"), "application app-<id>"),
    (
        re.compile(r"part-(\d+)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
        r"part-\1-<uuid>",
    ),
    # tqdm's elapsed<remaining and rate: "[00:10<00:00,  2.70s/split" -> "[<elapsed>, <rate>"
    (re.compile(r"\[[0-9:]+(<[0-9:?]+)?,\s*[0-9.?]+\s?[a-z]*/[a-z]+"), "[<elapsed>, <rate>"),
    # A phase without a percentage (a stream's, or after reading): "[00:03, records=" or "[00:03]"
    (re.compile(r"\[[0-9:]+(?=[,\]])"), "[<elapsed>"),
]


def normalise(lines: list[str], checkout: str) -> tuple[list[str], list[str]]:
    """(the command's own lines, its log records), each in order, with run-to-run
    differences replaced by placeholders and runs of spaces collapsed."""
    own, logs = [], []
    for line in lines:
        line = line.replace(checkout, "<checkout>")
        for pattern, replacement in _VOLATILE:
            line = pattern.sub(replacement, line)
        line = re.sub(r"\s+", " ", line).strip()
        if not line:
            continue
        (logs if re.match(r"<time> [A-Z]+ ", line) else own).append(line)
    return own, logs


def expected_output(step: Step) -> tuple[list[str], list[str]]:
    assert step.output is not None, f"{step.name} has no output block"
    return normalise(terminal_lines(step.output), README_CHECKOUT)


def actual_output(raws: list[str], checkout: Path) -> tuple[list[str], list[str]]:
    """The output of each command in turn (each with its own progress bar), normalised."""
    return normalise([line for raw in raws for line in terminal_lines(raw)], str(checkout))
