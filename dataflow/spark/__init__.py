"""Spark in this project's processes, one module per job:

``deployment``  where Spark runs (local, a cluster, Spark Connect) and what that asks of the
                landing zone; no PySpark import, so system checks and web processes stay light
``session``     the process's Spark session: made lazily, warmed up, recovered, killed
``jobs``        what a transform does with a session: job groups, row counts, quiet errors
``errors``      what a Spark failure means: out of memory, deterministic, its one-line message
"""
