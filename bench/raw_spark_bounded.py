"""The baseline for ``bench/bounded.py``: the same read-transform-write as plain PySpark.

Usage: ``python bench/raw_spark_bounded.py IN_DIR OUT_DIR [JAVA_OPTIONS]``. Run as a
subprocess so that JVM start is part of the measured time, with the same Spark settings
``runflow`` uses (``dataflow/spark/session.py`` and ``dataflow/settings.py``); JAVA_OPTIONS
go to the driver's JVM (``bench/bounded.py`` gives it the ones ``runflow``'s driver gets).
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

SCHEMA = "id BIGINT, ts TIMESTAMP, sensor STRING, temperature DOUBLE"
SQL = (
    "SELECT sensor, count(*) AS n, avg(temperature) AS avg_t, max(ts) AS last_ts FROM source GROUP BY sensor"
)


def session(app_name: str, java_options: str = "") -> SparkSession:
    """A session with the settings ``runflow`` uses (shared by the benches' raw sides)."""
    builder = (
        SparkSession.builder.appName(app_name)
        .master("local[*]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.memory", "2g")
    )
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def main(in_dir: str, out_dir: str, java_options: str = "") -> None:
    spark = session("raw-spark-bounded", java_options)
    frame = spark.read.schema(SCHEMA).option("header", True).csv(in_dir)
    frame.createOrReplaceTempView("source")
    spark.sql(SQL).write.mode("overwrite").option("compression", "snappy").parquet(out_dir)
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: raw_spark_bounded.py IN_DIR OUT_DIR [JAVA_OPTIONS]")
    main(*sys.argv[1:])
