"""One package per external system; importing this package registers them all."""

from connectors import files  # noqa: F401
