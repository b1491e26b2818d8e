"""One package per external system; importing this package registers them all."""

from connectors import files, sequence  # noqa: F401
