"""One package per external system; importing this package registers them all."""

from connectors import files, redis_streams, sequence

__all__ = ["files", "redis_streams", "sequence"]
