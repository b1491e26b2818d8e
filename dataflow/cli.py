"""The ``flowctl`` console command (``pip install`` puts it on the PATH): ``manage.py
flowctl`` from any directory, for the project that ``DJANGO_SETTINGS_MODULE`` (or
``--settings``) names, as ``django-admin`` is ``manage.py`` for any project. The settings
module must be importable: from the project's directory (which is added to the path, as
``manage.py``'s is), an installed package, or ``--pythonpath`` / ``PYTHONPATH``."""

from __future__ import annotations

import os
import sys

from django.core.management import execute_from_command_line


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not os.environ.get("DJANGO_SETTINGS_MODULE") and not any(a.startswith("--settings") for a in args):
        sys.stderr.write(
            "flowctl: no Django project named: set DJANGO_SETTINGS_MODULE to your project's settings "
            "(e.g. mysite.settings; dataflow.settings for the checkout's own), or pass --settings\n"
        )
        raise SystemExit(2)
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    execute_from_command_line(["flowctl", "flowctl", *args])
