"""The ASR worker's pure bookkeeping: admission, progress (low watermarks), checkpoint records,
the partition book, the outbox, the chunk intake (shared with replay) and the flow decisions
(thinning, backpressure, catch-up).

The Kafka run loop that drives it lives in ``pipeline.runtime.worker``.
"""
