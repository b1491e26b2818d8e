"""gunicorn's settings for the web process (admin, API, dashboard, /metrics); gunicorn reads
this file from the working directory: ``gunicorn dataflow.wsgi``. Each value may be changed
from the environment, as in the Dockerfile and docker-compose.yml."""

import os

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
# Processes, each with threads (gthread): a request mostly waits on PostgreSQL and Redis.
# WEB_CONCURRENCY is the variable gunicorn itself reads for the worker count.
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
worker_class = "gthread"
# A request that takes longer has its worker restarted: no view should (a flow's start
# queues its work and answers at once).
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
# What SIGTERM (docker stop, systemd, Kubernetes) leaves running requests to finish.
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "20"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "5"))
# Workers are replaced now and then, so a slow leak cannot grow for ever.
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "2000"))
max_requests_jitter = 200
accesslog = os.environ.get("GUNICORN_ACCESS_LOG", "-") or None  # empty: none
errorlog = "-"
# Not preloaded: each worker opens its own database and Redis connections after the fork.
preload_app = False
