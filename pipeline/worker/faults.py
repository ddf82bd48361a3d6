"""Named fault points: where a test makes the worker fail on purpose (failpoints).

Exactly-once bugs hide in windows a few microseconds wide: between ``send_offsets_to_transaction``
and ``commit_transaction``, between two recognizer batches of one step, inside a restore. A
fault test cannot reach them by killing a process from outside at a random time, so the worker
names them, and a test arms them (the technique of FoundationDB's and TiKV's failpoints)::

    STREAMSCRIBE_FAULTS="after_send_offsets=kill@3,recognizer_batch=raise@2"

``POINT=ACTION[:MS][@N]``, comma-separated: on the N-th time (1 by default) the loop passes
POINT, it does ACTION there, once:

- ``raise``: raise :class:`InjectedFaultError` (a crash of the loop: nothing more is committed);
- ``kill``: ``SIGKILL`` itself (``kill -9`` at exactly that place);
- ``stop``: ``SIGSTOP`` itself, every thread frozen as by a VM pause, until someone sends
  ``SIGCONT`` (librdkafka's heartbeats stop too, so the group moves on after the session
  timeout);
- ``sleep:MS``: block the loop's thread for MS milliseconds (a GC pause: heartbeats go on).

Nothing is armed by default; an unarmed point costs one dictionary lookup. Production must
never set ``STREAMSCRIBE_FAULTS`` (the worker logs a warning when it is set).
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline.asr.recognizer import Recognition, RecognitionRequest, Recognizer
from pipeline.errors import ConfigError, StreamscribeError

__all__ = [
    "FAULTS_PATTERN",
    "FaultAction",
    "FaultPoint",
    "FaultRule",
    "Faults",
    "InjectedFaultError",
    "parse_faults",
]

logger = logging.getLogger(__name__)


class FaultPoint(enum.StrEnum):
    """Where the worker can be made to fail."""

    AFTER_SEND_OFFSETS = "after_send_offsets"
    """The commit's offsets are in the open transaction; ``commit_transaction`` comes next."""
    BEFORE_COMMIT = "before_commit"
    """The commit's records are produced in the open transaction; no offsets sent yet."""
    RECOGNIZER_BATCH = "recognizer_batch"
    """Before each recognizer call (one batch of one engine step)."""
    RESTORE_AFTER_OFFSETS = "restore_after_offsets"
    """A restore has read the committed offsets; the checkpoints are read next."""
    RESTORE_BEFORE_ASSIGN = "restore_before_assign"
    """A restore has rebuilt its sessions; the partitions are assigned (or sought) next."""


class FaultAction(enum.StrEnum):
    RAISE = "raise"
    KILL = "kill"
    STOP = "stop"
    SLEEP = "sleep"


class InjectedFaultError(StreamscribeError):
    """Raised at an armed fault point (``raise``): a crash, on purpose."""


_POINTS = "|".join(point.value for point in FaultPoint)
_RULE = rf"(?:{_POINTS})=(?:raise|kill|stop|sleep:[0-9]+)(?:@[1-9][0-9]*)?"
FAULTS_PATTERN = rf"(?:{_RULE}(?:,{_RULE})*)?"
"""What ``STREAMSCRIBE_FAULTS`` accepts (empty: nothing armed)."""


@dataclass(frozen=True, slots=True)
class FaultRule:
    """``action`` at the ``hit``-th pass through ``point`` (1-based)."""

    point: FaultPoint
    action: FaultAction
    hit: int = 1
    sleep_ms: int = 0


def parse_faults(spec: str) -> tuple[FaultRule, ...]:
    """The rules of a ``STREAMSCRIBE_FAULTS`` value (module docstring).

    Raises:
        ConfigError: a rule that is not ``POINT=ACTION[:MS][@N]`` with a known point and action.
    """
    rules = []
    for text in filter(None, (part.strip() for part in spec.split(","))):
        name, _, rest = text.partition("=")
        action_text, _, hit_text = rest.partition("@")
        action_name, _, sleep_text = action_text.partition(":")
        try:
            point, action = FaultPoint(name), FaultAction(action_name)
            hit = int(hit_text) if hit_text else 1
            sleep_ms = int(sleep_text) if sleep_text else 0
        except ValueError:
            raise ConfigError(
                f"STREAMSCRIBE_FAULTS: cannot read {text!r} (POINT=ACTION[:MS][@N]; points: "
                f"{', '.join(FaultPoint)}; actions: raise, kill, stop, sleep:MS)"
            ) from None
        if hit < 1 or (action is FaultAction.SLEEP) != bool(sleep_text):
            raise ConfigError(f"STREAMSCRIBE_FAULTS: cannot read {text!r}")
        rules.append(FaultRule(point, action, hit, sleep_ms))
    return tuple(rules)


class Faults:
    """The armed rules of one process; ``hit(point)`` at each fault point. Single-threaded."""

    def __init__(
        self,
        rules: Sequence[FaultRule] = (),
        *,
        send_signal: Callable[[int], None] = lambda sig: os.kill(os.getpid(), sig),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._rules: dict[FaultPoint, list[FaultRule]] = {}
        for rule in rules:
            self._rules.setdefault(rule.point, []).append(rule)
        self._passes: dict[FaultPoint, int] = {}
        self._send_signal = send_signal
        self._sleep = sleep

    @classmethod
    def of(cls, spec: str) -> Faults:
        return cls(parse_faults(spec))

    def __bool__(self) -> bool:
        return bool(self._rules)

    def armed(self, point: FaultPoint) -> bool:
        return point in self._rules

    def hit(self, point: FaultPoint) -> None:
        """Pass through ``point``: do what a rule armed for this pass says (usually nothing)."""
        rules = self._rules.get(point)
        if not rules:
            return
        passes = self._passes[point] = self._passes.get(point, 0) + 1
        for rule in rules:
            if rule.hit == passes:
                self._act(rule)

    def _act(self, rule: FaultRule) -> None:
        logger.warning("fault point %s: %s (pass %d)", rule.point, rule.action, rule.hit)
        if rule.action is FaultAction.RAISE:
            raise InjectedFaultError(f"injected fault at {rule.point} (pass {rule.hit})")
        if rule.action is FaultAction.KILL:
            self._send_signal(signal.SIGKILL)
        elif rule.action is FaultAction.STOP:
            self._send_signal(signal.SIGSTOP)
        else:
            self._sleep(rule.sleep_ms / 1000)

    def around(self, recognizer: Recognizer) -> Recognizer:
        """``recognizer`` with ``RECOGNIZER_BATCH`` hit before each of its calls (itself when
        that point is not armed)."""
        if not self.armed(FaultPoint.RECOGNIZER_BATCH):
            return recognizer
        return _FaultyRecognizer(recognizer, self)


class _FaultyRecognizer:
    def __init__(self, inner: Recognizer, faults: Faults) -> None:
        self._inner = inner
        self._faults = faults

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Recognition]:
        self._faults.hit(FaultPoint.RECOGNIZER_BATCH)
        return self._inner.recognize(requests)
