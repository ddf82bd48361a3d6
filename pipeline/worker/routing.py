"""The engine's outputs to where they go: a partial out at once, the rest staged for the commit.

First, each step's outputs pass the redaction stage (``route_step``, with
``pipeline.redaction.redact_outputs``, as ``transcribe`` runs it): finals, partials and
suppressed hypotheses come out under the tenant's policy; a final that ends in a number that
may go on is held by the stage (its stream's ``Streams.redactor``) and routed when it comes out,
with the next one or alone, so its progress moves only then. Events carry no transcript text.

- a ``Partial`` goes through the idempotent partials producer now (it may repeat after a
  failover; under producer back-pressure it is thinned, never waited for);
- a ``Final`` is staged for the next transaction, and its stream's progress moves;
- a ``Suppressed`` final (a guard refused the hypothesis) moves the progress the same way and
  stages a ``hallucination_suppressed`` event;
- a ``SessionEnded`` ends its stream (checkpointed as ended at the next commit) and stages a
  ``session_ended`` event with its counts across owners.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from pipeline.asr.engine import EngineOutput, SessionEnded, Suppressed
from pipeline.asr.session import Session, SessionKey
from pipeline.contracts.messages import EventType, Final, Partial, to_json
from pipeline.redaction.outputs import redact_outputs
from pipeline.runtime.metrics import DurationKind, WorkerMetrics
from pipeline.worker.clients import WorkerClients
from pipeline.worker.staging import Staging
from pipeline.worker.streams import Streams

__all__ = ["Router"]


class Router:
    """Routes each output of an engine step (owned by the loop's thread)."""

    def __init__(
        self,
        partials_topic: str,
        *,
        clients: WorkerClients,
        streams: Streams,
        staging: Staging,
        metrics: WorkerMetrics,
    ) -> None:
        self._partials_topic = partials_topic
        self._clients = clients
        self._streams = streams
        self._staging = staging
        self._metrics = metrics
        self._held_since: dict[tuple[str, str], float] = {}  # monotonic s, per held stream

    def route_step(
        self, outputs: Iterable[EngineOutput], sessions: Mapping[SessionKey, Session]
    ) -> None:
        """One engine step's ``outputs`` through the redaction stage, then each routed;
        ``sessions``: the engine's open sessions after the step (their ``settled_ms`` ends a
        hold)."""
        redactor = self._streams.redactor
        before = dict(redactor.holding)
        for output in redact_outputs(redactor, outputs, sessions):
            if isinstance(output, Final) and output.redactions:
                self._metrics.count_redactions(r.entity for r in output.redactions)
            self.route(output)
        now_s = time.monotonic()
        for key, held in redactor.holding.items():
            earlier = before.get(key, ())
            if earlier and earlier[0] is held[0]:  # the chain grew
                newly_held = held[len(earlier) :]
            else:  # a new hold began in this step
                self._held_since[key] = now_s
                newly_held = held
            for _ in newly_held:
                self._metrics.count_held_final()
        for key in self._held_since.keys() - redactor.holding.keys():
            started_s = self._held_since.pop(key)
            if key in before:  # released by this step, not dropped by a forget since the last
                self._metrics.observe_hold(now_s - started_s)

    def route(self, output: EngineOutput) -> None:
        if isinstance(output, Partial):
            self._produce_partial(output)
        elif isinstance(output, Final):
            self._staging.final(output)
            key = SessionKey(output.call_id, output.channel)
            self._streams.finalized(key, output.utterance_index, output.end_ms, published=True)
        elif isinstance(output, Suppressed):
            self._metrics.count_suppressed_hallucination(output.guard)
            if output.final:
                self._streams.finalized(
                    output.key, output.utterance_index, output.end_ms, published=False
                )
                self._staging.commit_soon = True
                self._staging.event(
                    EventType.HALLUCINATION_SUPPRESSED,
                    output.key,
                    {"utterance_index": output.utterance_index, "guard": output.guard.value},
                )
        else:
            self._session_ended(output)

    def _produce_partial(self, partial: Partial) -> None:
        try:
            self._clients.partials.produce(
                self._partials_topic, key=partial.call_id.encode(), value=to_json(partial)
            )
        except BufferError:
            self._metrics.count_thinned_partials()
            return
        if partial.capture_ms is not None:
            latency_s = max(0, partial.emit_ms - partial.capture_ms) / 1000
            self._metrics.observe_duration(DurationKind.CHUNK_TO_PARTIAL, latency_s)

    def _session_ended(self, ended: SessionEnded) -> None:
        utterances, suppressed = self._streams.ended(ended.key, ended.utterances, ended.suppressed)
        self._staging.event(
            EventType.SESSION_ENDED,
            ended.key,
            {
                "tenant": ended.tenant,
                "duration_ms": ended.audio_ms,
                "speech_ms": ended.speech_ms,
                "utterances": utterances,
                "suppressed": suppressed,
            },
        )
        self._staging.commit_soon = True
