#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dataflow.settings")
    if sys.argv[1:2] == ["runflow"]:
        # The driver's JVM takes seconds to start: it starts now, while Django sets up, if
        # the flow needs Spark at all.
        from dataflow.management.runflow_spark import runflow_needs_spark
        from dataflow.spark.session import warm_up_before_django

        if runflow_needs_spark(sys.argv[2:]):
            warm_up_before_django()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
