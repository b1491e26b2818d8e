"""What a Spark failure means: the driver out of memory, an error the same query over the
same data raises again, and the one line a user reads on the run."""

from __future__ import annotations

#: The exit status of a Spark JVM that ran out of heap (Spark's ``SparkExitCode.OOM``).
JVM_OOM_EXIT = 52


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says that the Spark driver ran out of heap."""
    text = str(exc)
    return "java.lang.OutOfMemoryError" in text or "SparkOutOfMemoryError" in text
