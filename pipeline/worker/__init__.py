"""The ASR worker: pure per-partition bookkeeping (admission, progress, checkpoints).

The Kafka run loop that drives it lives in ``pipeline.runtime.worker``.
"""
