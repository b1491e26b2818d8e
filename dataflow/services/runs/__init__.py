"""The run engine: what drives a run from its first tick to its end, one module per job.

``tick``       the enumerator tick: serve split requests, start readers, watch for a stall,
               hand the run to its transform once every split is read
``slices``     one time slice of a reader
``transform``  the bounded transform: one Spark job over what the run landed, in numbered
               attempts fenced by the database
``replay``     what a replay of dead letters does differently: it adds to the sink
``finish``     the end of a run: its outcome, its Redis keys and landed files let go

A stream's transform is ``dataflow.services.streams``. Celery tasks and ``runflow`` call
these; the loops themselves live in ``source_support.runtime`` and are the same for every
connector.
"""
