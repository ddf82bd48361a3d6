"""Redaction: payment card numbers and personal data taken out of transcripts before they are
published (``docs/redaction.md``).

Pure: no Kafka, Redis, Prometheus or wall clock; the same engine outputs give the same
redacted records. In flow order:

- ``policy``: ``off``, ``pci``, ``pii`` or a list of entity types, per tenant
  (``TenantPolicies``, from ``RedactionSettings`` through ``RedactorConfig.from_settings``);
- ``numbers``: digit runs in the words Whisper writes (numerals, grouped digits, number words);
- ``context``, ``cued``, ``detectors``, ``emails``, ``dates``, ``phones``: which words spell
  which entity type (``find_entities``; ``cued``: a value announced by its cue, however the
  recognizer wrote its digits);
- ``apply``: tags in a final's text and words, its ``redactions`` (entity type and audio span);
  partials and free text masked;
- ``stage``: ``Redactor``, the stage a worker, ``transcribe`` or a replay calls per final and
  partial, with the per-channel hold of finals that end in an unfinished number;
- ``dtmf``: what an event may say about a keyed digit.

Use::

    redactor = Redactor(RedactorConfig.from_settings(settings.redaction))
    for output in engine.step().outputs:
        if isinstance(output, Final):
            publish_all(redactor.final(output))        # [] while held; 2 when joined
        elif isinstance(output, Partial):
            publish(redactor.partial(output))
    for key, session in engine.sessions.items():
        publish_all(redactor.advance(key.call_id, key.channel, session.settled_ms))
    publish_all(redactor.flush(call_id, channel))      # at a channel's end of stream
"""

from pipeline.contracts.messages import EntityType, Redaction
from pipeline.redaction.apply import DIGITS_TAG, mask_partial, mask_text, redact_finals
from pipeline.redaction.detectors import find_entities, unfinished_run
from pipeline.redaction.dtmf import DtmfReport, dtmf_notice
from pipeline.redaction.numbers import DigitRun, digit_runs, luhn_valid
from pipeline.redaction.phones import PhoneJudge
from pipeline.redaction.policy import (
    OFF,
    PCI,
    PII,
    Policy,
    TenantPolicies,
    parse_policy,
    parse_tenant_policies,
)
from pipeline.redaction.spans import Span
from pipeline.redaction.stage import MAX_HELD_FINALS, ChannelKey, Redactor, RedactorConfig

__all__ = [
    "DIGITS_TAG",
    "MAX_HELD_FINALS",
    "OFF",
    "PCI",
    "PII",
    "ChannelKey",
    "DigitRun",
    "DtmfReport",
    "EntityType",
    "PhoneJudge",
    "Policy",
    "Redaction",
    "Redactor",
    "RedactorConfig",
    "Span",
    "TenantPolicies",
    "digit_runs",
    "dtmf_notice",
    "find_entities",
    "luhn_valid",
    "mask_partial",
    "mask_text",
    "parse_policy",
    "parse_tenant_policies",
    "redact_finals",
    "unfinished_run",
]
