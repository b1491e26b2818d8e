"""What the stream connectors (Kafka, NATS JetStream, Kinesis, Redis Streams) share, one
module per Flink concept: ``split`` (a position kept in the split), ``enumerator``
(discovery on an interval, balanced and sticky assignment, the end of a bounded run),
``reader`` (records decoded with the metadata columns in the run's order) and ``source``
(the factory's common parts: format, stop rule, reader).

Only what means the same in every connector is here; how each system is reached, listed,
read and acknowledged stays in its connector.
"""
