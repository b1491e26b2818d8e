"""What a Spark failure means: the driver out of memory, an error the same query over the
same data raises again, and the one line a user reads on the run."""

from __future__ import annotations

#: The exit status of a Spark JVM that ran out of heap (Spark's ``SparkExitCode.OOM``).
JVM_OOM_EXIT = 52


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says that the Spark driver ran out of heap."""
    text = str(exc)
    return "java.lang.OutOfMemoryError" in text or "SparkOutOfMemoryError" in text


def driver_lost_message(error: str, found: str) -> str:
    """What a run says when its transform ran the Spark driver out of memory or the driver
    died under it: ``found`` (from ``session_recover``) and Spark's own line ``error``."""
    memory = "out of memory" in found
    hint = "the query needs more memory than the driver has (SPARK_DRIVER_MEMORY); " if memory else ""
    restart = "" if "Connect server" in found else "a new Spark session starts with the next job"
    return f"transform failed: {found} ({error[:300]}); {hint}{restart}".rstrip("; ")


#: SQLSTATE classes of errors that the same query over the same data raises again: data
#: exceptions (a bad cast), syntax and access rules, unsupported features, constraints.
DETERMINISTIC_SQLSTATE_CLASSES = ("22", "42", "0A", "23")


def is_deterministic(exc: BaseException) -> bool:
    """Whether Spark would raise ``exc`` again for the same query over the same data: it
    refused the query (analysis, parse) or says so by its SQLSTATE class."""
    if type(exc).__name__ in ("AnalysisException", "ParseException", "IllegalArgumentException"):
        return True
    get_sqlstate = getattr(exc, "getSqlState", None)  # Spark's errors (PySparkException)
    sqlstate = get_sqlstate() if get_sqlstate is not None else None
    return bool(sqlstate) and sqlstate[:2] in DETERMINISTIC_SQLSTATE_CLASSES


def spark_error_message(exc: Exception) -> str:
    """One line that says what went wrong: Spark's own first line, or for an error raised in
    the JVM (``An error occurred while calling o103.parquet.``) the Java exception and its
    root cause (``Mkdirs failed to create ...``)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    first = lines[0]
    if first.startswith("An error occurred while calling") and len(lines) > 1:
        thrown = lines[1].lstrip(": ")
        causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
        first = " caused by ".join(dict.fromkeys(short_java_name(t) for t in [thrown, *causes[-1:]]))
    return first[:2000]


def short_java_name(text: str) -> str:
    """``org.apache.hadoop.fs.X: message`` -> ``X: message``."""
    name, sep, rest = text.partition(": ")
    return f"{name.rsplit('.', 1)[-1]}{sep}{rest}" if "." in name and " " not in name else text
