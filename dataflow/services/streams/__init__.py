"""The transform of an unbounded run (a stream, watched files), one module per job.

``tick``        what each tick of a reading stream run does besides enumerating: keep its
                transform going, backpressure, checkpoints, metric samples, notes
``driver``      the streaming transform: an epoch per trigger, planned, run on Spark and
                committed into the sink exactly once
``epochs``      what an epoch takes (batches, the event-time range of its windows)
``query``       what kind of query a transform is (stateless, tumbling windows, whole input)
``event_time``  watermarks and window bounds from the event times readers saw
"""
