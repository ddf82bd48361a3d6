"""The redaction stage over one engine step's outputs, as ``transcribe`` (and a replay) run it.

``redact_outputs`` turns what ``StreamingEngine.step`` returned into what may be shown or
published: finals through ``Redactor.final`` (held ones come out later, joined or on their own),
partials and suppressed hypotheses masked, a channel's held finals flushed before its
``SessionEnded``, and holds that ran out (``Redactor.advance`` against each open session's
``settled_ms``) released after the step's own outputs. Not imported by ``pipeline.redaction``
itself: it needs the engine's output types.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Protocol

from pipeline.asr.engine import EngineOutput, SessionEnded, Suppressed
from pipeline.asr.session import SessionKey
from pipeline.contracts.messages import Final, Partial
from pipeline.redaction.stage import Redactor

__all__ = ["SettlingSession", "redact_outputs"]


class SettlingSession(Protocol):
    """What the stage needs of an open session (``asr.session.Session``)."""

    @property
    def settled_ms(self) -> int:
        """The position before which no new utterance of the session can start any more."""
        ...


def redact_outputs(
    redactor: Redactor,
    outputs: Iterable[EngineOutput],
    sessions: Mapping[SessionKey, SettlingSession],
) -> list[EngineOutput]:
    """``outputs`` of one engine step as they may leave the process, in order; ``sessions``:
    the engine's open sessions after that step."""
    shown: list[EngineOutput] = []
    for output in outputs:
        if isinstance(output, Final):
            shown.extend(redactor.final(output))
        elif isinstance(output, Partial):
            shown.append(redactor.partial(output))
        elif isinstance(output, Suppressed):
            masked = redactor.text(output.text, output.tenant)
            shown.append(
                output if masked == output.text else dataclasses.replace(output, text=masked)
            )
        elif isinstance(output, SessionEnded):
            shown.extend(redactor.flush(output.key.call_id, output.key.channel))
            shown.append(output)
    for call_id, channel in list(redactor.holding):
        session = sessions.get(SessionKey(call_id, channel))
        if session is None:
            shown.extend(redactor.flush(call_id, channel))  # closed without a SessionEnded
        else:
            shown.extend(redactor.advance(call_id, channel, session.settled_ms))
    return shown
