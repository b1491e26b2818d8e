"""One package per external system; importing this package registers them all."""

from connectors import files, nats, redis_streams, sequence

__all__ = ["files", "nats", "redis_streams", "sequence"]
