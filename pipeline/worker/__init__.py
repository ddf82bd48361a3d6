"""The ASR worker: a pure core and, around it, the thin Kafka shell that drives it.

Pure core (no confluent-kafka, Redis or Prometheus; ``make lint`` checks it with the import
contracts in ``pyproject.toml``): ``intake`` (a record → Admitted / Duplicate / Rejected /
Skipped, shared with replay), ``admission``, ``streams`` (each stream's bookkeeping in one
place), ``progress``, ``book``, ``checkpoint`` (records) and ``checkpointing`` (what a commit
checkpoints, what a restore rebuilds), ``staging`` and ``outbox`` (what the next commit
publishes), ``flow`` (thinning, backpressure, catch-up, the fetch clock), ``dead_letter``,
``faults``, ``status``.

Shell, in the order a chunk meets it: ``loop`` (``AsrWorker``: poll → admit → step → route →
commit → backpressure), ``routing``, ``committer`` (the transactional producer, exactly once),
``pacing``, ``handover`` (assign / revoke / lost / rewind / leave), ``clients``.
"""
