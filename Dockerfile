# One image for every process: web, Celery worker, beat, the migrate job, and the Spark
# standalone master/worker (started from the pyspark package's own spark-class).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Java for the Spark driver (in the worker) and for the standalone master/worker.
# pyspark 4 needs Java 17+. The man1 directory is missing on slim images and the JRE's
# postinst (update-alternatives) fails without it.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY requirements.txt ./
RUN pip install -r requirements.txt

# The pip-installed pyspark is a complete Spark distribution (jars + bin/spark-class).
# Fail the build here, not at run time, if that path ever moves.
ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark
ENV PATH="${SPARK_HOME}/bin:${PATH}"
RUN test -x "${SPARK_HOME}/bin/spark-class" && test -d "${SPARK_HOME}/jars"

# Only what runs; var/, out/, tests/, bench/ and .git stay out of the image. pyproject.toml
# declares the connectors' entry points (source_support/plugins.py reads them from it).
COPY manage.py gunicorn.conf.py pyproject.toml ./
COPY dataflow ./dataflow
COPY connectors ./connectors
COPY source_support ./source_support
COPY templates ./templates
COPY examples ./examples

# The static files, compressed and with hashed names, as the production profile serves them
# (WhiteNoise). The build's key and var directory are thrown away: none is baked into the image.
ENV DJANGO_STATIC_ROOT=/app/staticfiles
RUN DJANGO_SECRET_KEY=collectstatic-only-not-a-key DATAFLOW_PROFILE=production \
    DATAFLOW_VAR_DIR=/tmp/build-var python manage.py collectstatic --noinput -v0 \
 && rm -rf /tmp/build-var

# Non-root. The directories that the compose file mounts as named volumes are created here
# owned by that user: Docker copies ownership into a new, empty named volume on first mount.
#   /var/lib/dataflow            DATAFLOW_VAR_DIR (settings.py mkdirs it at import; /app is root's)
#   /var/lib/dataflow/landing    the landing zone (readers write, Spark executors read)
#   /var/lib/dataflow/spark-work SPARK_WORKER_DIR (the default, $SPARK_HOME/work, is root's)
#   /data, /out                  flow sources and sinks
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/dataflow dataflow \
 && mkdir -p /var/lib/dataflow/landing /var/lib/dataflow/spark-work /data /out \
 && chown -R dataflow:dataflow /var/lib/dataflow /data /out
USER dataflow

ENV DATAFLOW_VAR_DIR=/var/lib/dataflow \
    DATAFLOW_LANDING_ROOT=/var/lib/dataflow/landing \
    SPARK_WORKER_DIR=/var/lib/dataflow/spark-work

EXPOSE 8000
# The web process: gunicorn with gunicorn.conf.py (0.0.0.0:8000; workers, threads and
# timeouts from WEB_CONCURRENCY, GUNICORN_THREADS, GUNICORN_TIMEOUT). exec form: gunicorn is
# PID 1 and gets docker stop's SIGTERM itself (graceful_timeout for running requests).
CMD ["gunicorn", "dataflow.wsgi"]
